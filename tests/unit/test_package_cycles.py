"""No import cycle in the packages ``tests/unit/test_layering.py`` does not walk: the Python client and the
benchmarks (``combee_core`` and ``streams`` are checked there), with the same cycle finder, function-local and
``TYPE_CHECKING`` imports counted."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_layering import _cycle

ROOT = Path(__file__).resolve().parents[2]


def _graph(package: str) -> dict[str, set[str]]:
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in sorted((ROOT / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {imported for imported in found if imported in modules}
    return graph


@pytest.mark.parametrize("package", ["combee_client", "bench"])
def test_no_import_cycles(package):
    graph = _graph(package)
    assert len(graph) > 1
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
