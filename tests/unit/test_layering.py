"""The layout of ``streams/`` holds (docs/architecture.md, "Layers"): each package imports only the layers below it,
no module of ``streams`` or of ``combee_core`` imports itself back through a cycle, and every ``streams.*`` import
names a module of this tree. Read from the source (ast), so it covers imports inside functions and under
``TYPE_CHECKING`` as well."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STREAMS = ROOT / "streams"

ALLOWED = {
    "broker": set(),
    "topology": {"broker"},
    "demo": {"topology", "broker"},
    "runs": {"topology", "broker"},
    "local_model": {"broker"},
    "testing": {"topology", "broker"},
    "ingest": {"topology", "broker"},
    "serving": {"topology", "broker"},
    "review": {"topology", "broker"},
    "cli": {"demo", "runs", "local_model", "ingest", "serving", "review", "topology", "broker"},
}
"""Which ``streams`` packages each package may import (besides itself and ``combee_core``)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(STREAMS.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (``from P import m`` counts as ``P.m`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in known or base == "streams")  # streams/ holds only packages
    return {imported for imported in found if imported.split(".")[0] in ("streams", "combee_core")}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules) | {_module_name(p) for p in (ROOT / "combee_core").rglob("*.py")}
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_streams_module_is_in_a_package_of_the_layout(graph):
    stray = sorted(name for name in graph if name != "streams" and _package(name) not in ALLOWED)
    assert stray == [], "a module outside the layout's packages: place it in one (and in ALLOWED)"


def test_every_streams_import_names_a_module_of_the_tree(graph):
    """An import of a moved module must fail here, not resolve to an installed copy of an older tree (the tests,
    the benchmarks and the streams modules alike)."""
    known = set(graph)
    users = {name: imports for name, imports in graph.items()}
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]):
        users[_module_name(path)] = _imports(_module_name(path), path, known)
    missing = sorted((name, imported) for name, imports in users.items() for imported in imports
                     if imported.split(".")[0] == "streams" and imported not in known)
    assert missing == []


def test_no_package_imports_a_layer_above_it_or_beside_it(graph):
    upward = sorted((name, imported) for name, imports in graph.items() for imported in imports
                    if imported.startswith("streams.") and _package(name) in ALLOWED
                    and _package(imported) != _package(name) and _package(imported) not in ALLOWED[_package(name)])
    assert upward == []


def test_combee_core_imports_nothing_of_streams():
    core = {_module_name(p): p for p in sorted((ROOT / "combee_core").rglob("*.py"))}
    found = sorted((name, imported) for name, path in core.items() for imported in _imports(name, path, set())
                   if imported.split(".")[0] == "streams")
    assert found == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules of ``graph`` (a package's ``__init__`` counted as the package), or None."""
    edges = {name: {i for i in imports if i in graph and i != name} for name, imports in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_no_import_cycles_between_streams_modules(graph):
    """A package's ``__init__`` importing its own modules is not a cycle unless one imports the package back."""
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_import_cycles_between_combee_core_modules():
    """The same rule for the pure core, function-local and ``TYPE_CHECKING`` imports included (a cycle kept alive by
    one is still a cycle): the simulator (``llm/simulator.py``, ``llm/honest.py``, ``sim/``) builds on the roles'
    modules and the task suite's model (``sim/suite.py``), never the reverse; a processor's helpers name its state
    through an interface (``promote/promoter_resume.PromoterState``), not its class; the embedder a setting names
    is chosen above the embedders (``playbook/embedding_models.py``)."""
    core = {_module_name(path): path for path in sorted((ROOT / "combee_core").rglob("*.py"))}
    graph = {name: _imports(name, path, set(core)) for name, path in core.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_test_harness_reads_the_tests_bootstrap_variable():
    """The product has one bootstrap variable, ``COMBEE_KAFKA_BOOTSTRAP`` (docs/broker.md); ``KAFKA_BOOTSTRAP_SERVERS``
    belongs to the tests' and benchmarks' resolver in ``streams/testing/``."""
    readers = sorted(name for name, path in _modules().items()
                     if "KAFKA_BOOTSTRAP_SERVERS" in path.read_text(encoding="utf-8") and _package(name) != "testing")
    assert readers == []
