"""combee_core is pure: importing any of it loads no Kafka client and nothing of streams/ (docs/architecture.md,
"Layers"); its models and settings load without the LLM layer."""

import subprocess
import sys
from pathlib import Path

import combee_core
from tests.hang_guard import SUBPROCESS_HANG_S

CORE = Path(combee_core.__file__).parent

def _run(code: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()


def test_every_combee_core_module_imports_without_kafka_or_streams(fresh_import_facts):
    """Every module under combee_core imported in a fresh interpreter (tests/unit/fresh_interpreter.py)."""
    walk = fresh_import_facts["core_walk"]
    assert "error" not in walk, walk["error"]
    modules = [path for path in CORE.rglob("*.py") if path.name != "__init__.py"]
    assert walk["facts"]["modules"] >= len(modules)  # every module was imported (packages count too)
    assert walk["facts"]["forbidden"] == []


def test_models_and_settings_import_without_the_llm_layer():
    code = ("import sys, combee_core, combee_core.models, combee_core.settings;"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiokafka', 'faust', 'kafka', 'litellm'}))")
    assert _run(code)[-1] == "[]"


def test_the_command_line_imports_without_a_kafka_client_or_the_llm_layer():
    """``combee --help`` and every sub-command's parser load neither aiokafka nor litellm: a command imports what it
    needs when it runs (issue 27: `import streams.cli` loaded aiokafka through `combee promote`). Nor the LLM roles,
    the playbook's curation (numpy), plotting or the embedding runtime (issue 43: `--help` in seconds)."""
    heavy = {"aiokafka", "litellm", "openai", "numpy", "matplotlib", "onnxruntime", "combee_core.playbook",
             "combee_core.llm"}
    code = ("import sys, streams.cli; streams.cli.build_parser();"
            f"print(sorted(m for m in sys.modules if m in {heavy!r} or m.split('.')[0] in {heavy!r}))")
    assert _run(code)[-1] == "[]"


def test_a_workers_start_imports_no_secret_scanner():
    """detect-secrets (and the requests it imports: a quarter of a second) loads when a text is first scanned, not
    when a worker starts (issue 43: a worker ready within 5 s)."""
    code = ("import sys, streams.topology.worker;"
            "print(sorted(m for m in ('detect_secrets', 'requests') if m in sys.modules))")
    assert _run(code)[-1] == "[]"
