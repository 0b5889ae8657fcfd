"""The session's processes read compiled bytecode even where ``PYTHONDONTWRITEBYTECODE`` forbids writing it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import bytecode_cache

PROBE = ("import importlib.util, os, streams.topology.pipeline as m; "
         "print(os.path.isfile(importlib.util.cache_from_source(m.__file__)))")


def test_a_child_started_by_a_test_finds_the_projects_bytecode_compiled():
    """What a `combee` child of an integration test gets: its imports read bytecode instead of compiling ~230 modules
    (with the setting and no cache, the child compiles each in memory and finds no file)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600,
                         cwd=bytecode_cache.ROOT, check=True).stdout
    assert out.strip() == "True", out


def test_compiling_writes_only_under_the_prefix_and_leaves_pytests_own_files_out(tmp_path: Path):
    prefix = tmp_path / "pyc"
    assert bytecode_cache.compile_into(prefix, ("streams/topology", "tests/integration"))
    mirrored = prefix / bytecode_cache.ROOT.relative_to(bytecode_cache.ROOT.anchor)
    assert list((mirrored / "streams" / "topology").glob("pipeline.*.pyc"))
    assert list((mirrored / "tests" / "integration").glob("topology_support.*.pyc"))
    assert not list((mirrored / "tests").rglob("test_*.pyc")) and not list((mirrored / "tests").rglob("conftest.*"))
    assert sys.pycache_prefix != str(prefix)  # the caller's own prefix is restored
