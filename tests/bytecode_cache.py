"""Compiled bytecode for the project's sources during a test session when the environment forbids writing it.

With ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines and CI images) no process writes ``__pycache__``, so every
xdist worker and every ``combee`` child a test starts compiles the ~230 ``streams``/``combee_core`` modules it imports
again (about 0.5 CPU-s per process, docs/benchmarks.md, "The suite's time, eighth session"). Here the controller
compiles ``combee_core``, ``streams``, ``combee_client``, ``bench`` and the tests' support modules once into a
temporary directory and points ``PYTHONPYCACHEPREFIX`` there: workers and children inherit it and read that
bytecode; nothing is written into the source tree, and the directory is removed when the session ends. Test modules
and conftests are left out: pytest rewrites their asserts itself (that cache is not written under the setting).

Nothing happens when bytecode is written anyway (no cost to save) or when ``PYTHONPYCACHEPREFIX`` is already set
(the developer chose where it goes)."""

from __future__ import annotations

import compileall
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("combee_core", "streams", "combee_client", "bench", "tests")
PREFIX_ENV = "PYTHONPYCACHEPREFIX"
REWRITTEN_BY_PYTEST = re.compile(r"([/\\]test_[^/\\]*|[/\\]conftest)\.py$")
"""Files pytest compiles itself (assert rewriting): bytecode compiled here would never be read."""


def wanted(config: pytest.Config) -> bool:
    """True in the session's first process when nothing would otherwise keep compiled bytecode."""
    if "PYTEST_XDIST_WORKER" in os.environ:  # a worker inherits the controller's prefix
        return False
    return sys.dont_write_bytecode and not sys.pycache_prefix and PREFIX_ENV not in os.environ


def compile_into(prefix: Path, folders: tuple[str, ...] = PACKAGES) -> bool:
    """Compile ``folders`` (the project's packages) into ``prefix``, a ``sys.pycache_prefix`` tree; True when all
    compiled."""
    previous, sys.pycache_prefix = sys.pycache_prefix, str(prefix)
    try:
        return all(compileall.compile_dir(ROOT / name, quiet=1, rx=REWRITTEN_BY_PYTEST)
                   for name in folders if (ROOT / name).is_dir())
    finally:
        sys.pycache_prefix = previous


def cache_for_the_session(config: pytest.Config) -> None:
    """From tests/conftest.py's ``pytest_configure``: before xdist starts its workers, so they inherit the prefix."""
    if not wanted(config):
        return
    prefix = Path(tempfile.mkdtemp(prefix="combee-test-bytecode-"))
    if not compile_into(prefix):  # a file that does not compile fails its own tests; the rest is cached
        log.warning("some project files did not compile into %s", prefix)
    sys.pycache_prefix = str(prefix)
    os.environ[PREFIX_ENV] = str(prefix)

    def remove() -> None:
        os.environ.pop(PREFIX_ENV, None)
        sys.pycache_prefix = None
        shutil.rmtree(prefix, ignore_errors=True)

    config.add_cleanup(remove)
