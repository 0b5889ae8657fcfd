"""The stage is the unit: a stage is one declaration (a ``StageSpec`` in ``combee_core/topology.py``, named in
``STAGES``), one package in ``combee_core`` (``combee_core/<spec.core>/processor.py``) and one binding in
``streams/topology/stages/<name>.py`` (the ``Stage`` subclass whose ``spec`` it is). Everything else is derived from the
declaration (``tests/unit/test_topology_declaration.py``) except the files :data:`KEPT_BY_HAND` lists: adding a
stage, this test names each of them that does not name it yet (docs/architecture.md, "Adding a stage")."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import yaml

from combee_core import topology
from combee_core.topology import STAGES, StageSpec
from streams.topology import worker
from streams.topology.worker import parse_stages
from tests.unit.import_scan import imported_modules

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "combee_core"
BINDINGS = ROOT / "streams" / "topology" / "stages"


def _stages_of_commands(commands: list[list[str]]) -> set[str]:
    return {name for args in commands if "--stages" in args for name in parse_stages(args[args.index("--stages") + 1])}


def _compose_stages() -> set[str]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return _stages_of_commands([service.get("command") or [] for service in services.values()])


def _k8s_stages() -> set[str]:
    docs = [doc for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]
    return _stages_of_commands([container.get("args") or [] for doc in docs if doc["kind"] == "Deployment"
                                for container in doc["spec"]["template"]["spec"]["containers"]])


def _deploy_readme_stages() -> set[str]:
    text = (ROOT / "deploy" / "README.md").read_text()
    cells = [line.strip().strip("|").split("|")[1].strip().strip("`")
             for line in text[text.index("## Stage groups"):].splitlines()[4:] if line.startswith("|")]
    return {name for cell in cells for name in parse_stages(cell)}


def map_rows(text: str) -> dict[str, list[str]]:
    """docs/architecture.md's table of stages under "## The map": stage -> its other cells."""
    section = text[text.index("## The map"):]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == len(MAP_HEADER):
            rows[cells[0].strip("`")] = cells[1:]
        elif rows and not line.startswith("|"):
            break
    return rows


def _map_stages() -> set[str]:
    return set(map_rows((ROOT / "docs" / "architecture.md").read_text()))


KEPT_BY_HAND: dict[str, tuple[str, Callable[[], set[str]]]] = {
    "docker-compose.yml": ("a worker service's --stages (the services together run every stage)", _compose_stages),
    "deploy/k8s/": ("the same group's Deployment args and header line", _k8s_stages),
    "deploy/README.md": ("the stage groups table (what bounds the group)", _deploy_readme_stages),
    "docs/architecture.md": ("a row of the map's table (## The map)", _map_stages),
}
"""What else a new stage changes, besides its declaration, its package and its binding: each file, what to add to it
and which stages it names now. ``tests/unit/test_deploy_static.py`` checks the deploy files further (each group
the same everywhere, bounded as its first stage's input says); :func:`test_the_map_table_is_the_declaration` checks
the map's rows."""


def test_every_stage_declared_in_topology_is_in_stages():
    """A ``StageSpec`` left out of ``STAGES`` would be a stage nothing runs."""
    declared = [value for value in vars(topology).values() if isinstance(value, StageSpec)]
    assert sorted(spec.name for spec in declared) == sorted(spec.name for spec in STAGES)



def test_every_stage_is_one_core_package_and_one_binding_that_calls_it():
    processors = {spec.name: f"combee_core.{spec.core}.processor" for spec in STAGES}
    binding_files: dict[Path, str] = {}
    for spec in STAGES:
        package = CORE / spec.core
        assert (package / "processor.py").is_file(), f"{spec.name}: no combee_core/{spec.core}/processor.py"
        init = ast.parse((package / "__init__.py").read_text())
        assert [type(node) for node in init.body] == [ast.Expr], f"combee_core/{spec.core}/__init__.py: docstring only"
        binding = worker.STAGES[spec.name]
        path = Path(inspect.getsourcefile(binding) or "")
        assert path.parent == BINDINGS, f"{spec.name}: its binding lives in streams/topology/stages/"
        assert path.stem == spec.name.replace("-", "_"), f"{spec.name}: its binding is named by it, not {path.name}"
        assert path not in binding_files, f"{spec.name} and {binding_files.get(path)} share {path.name}"
        binding_files[path] = spec.name
        imported = imported_modules(path)
        called = {name for name, module in processors.items() if module in imported}
        assert called == {spec.name}, f"{path.name} must call its own stage's processor only, calls {sorted(called)}"


def test_no_stage_package_imports_another_stages_processor():
    """The stage is the unit: what two stages share lives beside them (models, playbook, processors/effects), not in
    one of them."""
    packages = {spec.core for spec in STAGES}
    crossing = []
    for spec in STAGES:
        for path in sorted((CORE / spec.core).glob("*.py")):
            for module in imported_modules(path):
                parts = module.split(".")
                if (len(parts) >= 3 and parts[0] == "combee_core" and parts[1] in packages and parts[1] != spec.core
                        and parts[2] == "processor"):
                    crossing.append(f"{path.relative_to(ROOT)} imports {module}")
    assert crossing == []


def test_every_file_kept_by_hand_names_every_stage():
    """Adding a stage, this fails with the list of what else to change."""
    missing = [f"{where}: add {sorted(stage.name for stage in STAGES if stage.name not in names)} ({what})"
               for where, (what, read) in KEPT_BY_HAND.items()
               if not {stage.name for stage in STAGES} <= (names := read())]
    assert missing == [], "a stage is declared that these files do not name yet:\n" + "\n".join(missing)


def _hand_lists(path: Path, root: Path = ROOT) -> list[str]:
    """Literal collections or comma-joined strings that name five stages or more: a list of the stages kept by
    hand (the LLM roles' three tasks, which share three stages' names, are not one)."""
    names = {spec.name for spec in STAGES}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        items: list[str] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[a-z,-]+", node.value):
            items = node.value.split(",")
        if len(set(items) & names) >= 5:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_product_module_lists_the_stages_by_hand():
    """The product's code derives every list of stages from ``combee_core.topology.STAGES`` (benchmarks may choose
    the stages they run)."""
    sources = [p for d in ("combee_core", "streams", "combee_client") for p in sorted((ROOT / d).rglob("*.py"))]
    assert [hit for path in sources if path.name != "topology.py" for hit in _hand_lists(path)] == []


def test_the_hand_list_scan_finds_a_hand_list(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('A = ("reflect", "batch", "aggregate", "reduce", "control")\nB = ("reflect", "aggregate", '
                      '"reduce")\nC = "reflect,batch,aggregate,reduce,guard"\n')
    assert _hand_lists(sample, tmp_path) == ["sample.py:1", "sample.py:3"]


MAP_HEADER = ("stage", "package in `combee_core/`", "binding in `streams/topology/stages/`", "consumes", "LLM",
              "runs")


def expected_map_rows() -> dict[str, list[str]]:
    """The map's rows as the declaration and the bindings say them."""
    rows = {}
    for spec in STAGES:
        binding = Path(inspect.getsourcefile(worker.STAGES[spec.name]) or "").name
        runs = spec.runs_when.said or "always"
        rows[spec.name] = [f"`{spec.core}/`", f"`{binding}`", ", ".join(f"`{t}`" for t in spec.consumes),
                           "yes" if spec.llm else "no", runs]
    return rows


def test_the_map_table_is_the_declaration():
    """docs/architecture.md's map table: one row per declared stage, in the declaration's order, each naming its
    package, its binding, its input, whether it calls the LLM and when it runs."""
    rows = map_rows((ROOT / "docs" / "architecture.md").read_text())
    expected = expected_map_rows()
    table = "\n".join("| " + " | ".join([f"`{name}`", *cells]) + " |" for name, cells in expected.items())
    assert list(rows.items()) == list(expected.items()), f"the map's rows should read:\n{table}"
