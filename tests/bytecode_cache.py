"""Compiled bytecode for the project's sources during a test session when the environment forbids writing it.

With ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines and CI images) no process writes ``__pycache__``, so every
xdist worker and every ``combee`` child a test starts compiles the ~230 ``streams``/``combee_core`` modules it imports
again (about 0.5 CPU-s per process, docs/benchmarks.md, "The suite's time, eighth session"). Here the session's
first process compiles the project's packages once, before xdist starts its workers, writing only the bytecode
files that are missing, and removes exactly those files (and the ``__pycache__`` folders it made) when the session
ends: the tree is left as the setting wants it. Test modules and conftests are left out: pytest rewrites their
asserts itself (that cache is not written under the setting).

``PYTHONPYCACHEPREFIX`` would keep the tree clean too, but it moves every lookup there, the standard library's and
the installed packages' included: a child importing the pipeline took 3.3 CPU-s instead of 1.6 (same section).

Nothing happens when bytecode is written anyway (no cost to save) or when ``PYTHONPYCACHEPREFIX`` is set (the
developer chose where it goes)."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("combee_core", "streams", "combee_client", "bench", "tests")
REWRITTEN_BY_PYTEST = re.compile(r"(^test_.*|^conftest)\.py$")
"""Files pytest compiles itself (assert rewriting): bytecode compiled here would never be read."""


def wanted() -> bool:
    """True in the session's first process when nothing would otherwise keep compiled bytecode."""
    if "PYTEST_XDIST_WORKER" in os.environ:  # a worker runs after the controller compiled
        return False
    return sys.dont_write_bytecode and not sys.pycache_prefix


def compile_missing(folders: tuple[str, ...] = PACKAGES, root: Path = ROOT) -> list[Path]:
    """Compile each source file under ``folders`` (of ``root``) that has no bytecode file yet; return what was
    written (the bytecode files, then the ``__pycache__`` folders made for them). A file that does not compile is
    skipped: its own tests fail on it."""
    written: list[Path] = []
    made: list[Path] = []
    for name in folders:
        for source in sorted((root / name).rglob("*.py")):
            if REWRITTEN_BY_PYTEST.match(source.name) or "__pycache__" in source.parts:
                continue
            target = Path(importlib.util.cache_from_source(str(source)))
            if target.exists():
                continue
            if not target.parent.exists():
                made.append(target.parent)
            try:
                py_compile.compile(str(source), cfile=str(target), doraise=True)
            except (py_compile.PyCompileError, OSError):
                continue
            written.append(target)
    return written + made


def remove(written: list[Path]) -> None:
    """Remove the bytecode files, then the folders (when empty) :func:`compile_missing` wrote."""
    for path in written:
        try:
            path.rmdir() if path.is_dir() else path.unlink()
        except OSError:  # gone already, or a folder another process also wrote into
            continue


def cache_for_the_session(config: pytest.Config) -> None:
    """From tests/conftest.py's ``pytest_configure``: before xdist starts its workers, so they find the bytecode."""
    if not wanted():
        return
    written = compile_missing()
    config.add_cleanup(lambda: remove(written))
