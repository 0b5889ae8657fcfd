import subprocess
import sys


def test_combee_core_imports_no_kafka_or_faust():
    code = (
        "import sys, combee_core, combee_core.models, combee_core.settings;"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('aiokafka','faust','kafka','litellm')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
