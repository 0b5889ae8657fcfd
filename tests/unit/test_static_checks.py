"""The linter and the type checker, as configured in pyproject.toml, pass on the tree (both come with the
test extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hang_guard import SUBPROCESS_HANG_S

ROOT = Path(__file__).resolve().parents[2]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    """combee_core with mypy's strict checks, streams/ with its defaults ([tool.mypy] in pyproject.toml)."""
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
