"""The unit lane's list of slow tests (tests/unit/conftest.py) names tests that exist, and the lane leaves them out."""

import re
import subprocess
import sys
from pathlib import Path

from tests.hang_guard import SUBPROCESS_HANG_S
from tests.unit.conftest import SLOW

UNIT = Path(__file__).resolve().parent


def test_every_listed_slow_test_exists():
    for filename, names in SLOW.items():
        source = (UNIT / filename).read_text()
        defined = set(re.findall(r"^(?:async )?def (test_\w+)", source, flags=re.MULTILINE))
        assert names == ("*",) or set(names) <= defined, (filename, set(names) - defined)


def test_the_fast_lane_leaves_out_the_listed_tests_and_keeps_the_others():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
                           str(UNIT / "test_budget.py"), str(UNIT / "test_static_checks.py")],
                          cwd=UNIT.parents[1], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    collected = done.stdout
    assert "test_budget.py::" in collected  # the budget's quick tests stay in the lane
    for name in SLOW["test_budget.py"]:
        assert f"::{name}" not in collected
    assert "test_static_checks.py::" not in collected
