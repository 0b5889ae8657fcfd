"""No import cycle in the packages ``tests/unit/test_layering.py`` does not walk: the Python client and the
benchmarks (``combee_core`` and ``streams`` are checked there), with the same cycle finder, function-local and
``TYPE_CHECKING`` imports counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.import_scan import imported_modules
from tests.unit.test_layering import _cycle

ROOT = Path(__file__).resolve().parents[2]


def _graph(package: str) -> dict[str, set[str]]:
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in sorted((ROOT / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {imported for imported in imported_modules(path) if imported in modules}
    return graph


@pytest.mark.parametrize("package", ["combee_client", "bench"])
def test_no_import_cycles(package):
    graph = _graph(package)
    assert len(graph) > 1
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
