"""The session's processes read compiled bytecode even where ``PYTHONDONTWRITEBYTECODE`` forbids writing it."""

from __future__ import annotations

import importlib.util
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


def test_only_missing_bytecode_is_written_and_the_session_end_removes_exactly_that(tmp_path: Path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name, text in {"a.py": "A = 1\n", "sub/b.py": "B = 2\n", "test_c.py": "def test(): pass\n",
                       "conftest.py": "", "broken.py": "def (\n"}.items():
        (package / name).write_text(text)
    kept = Path(importlib.util.cache_from_source(str(package / "sub" / "b.py")))
    kept.parent.mkdir()
    kept.write_bytes(b"a developer's own bytecode")

    written = bytecode_cache.compile_missing(("pkg",), root=tmp_path)
    a_pyc = Path(importlib.util.cache_from_source(str(package / "a.py")))
    assert set(written) == {a_pyc, a_pyc.parent}  # pytest's own files and the broken one are left out
    assert bytecode_cache.compile_missing(("pkg",), root=tmp_path) == []

    bytecode_cache.remove(written)
    assert not a_pyc.parent.exists()
    assert kept.read_bytes() == b"a developer's own bytecode"
