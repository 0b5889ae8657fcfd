"""The stage is the unit: a stage is one declaration (one ``NAME = StageSpec(...)`` statement in
``combee_core/topology.py``: declared is registered), one package in ``combee_core``
(``combee_core/<spec.core>/processor.py``) and one binding, ``streams/topology/stages/<name>.py`` (the ``Stage``
subclass whose ``spec`` it is; the worker finds it there by the stage's name). Everything else is derived from the
declaration (``tests/unit/test_topology_declaration.py``) except the files :data:`KEPT_BY_HAND` lists: adding a
stage, this test names each of them that does not name it yet (docs/architecture.md, "Adding a stage").
:func:`test_a_new_stage_is_one_core_package_one_binding_and_one_declaration_line` adds one to a copy of the tree and
proves it."""

from __future__ import annotations

import ast
import difflib
import filecmp
import inspect
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from combee_core import topology
from combee_core.topology import STAGES, StageSpec, Topic
from streams.topology import worker
from streams.topology.worker import binding_module, parse_stages
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


def test_the_stages_are_the_declarations_in_the_order_written():
    """Declaring a ``StageSpec`` in ``combee_core/topology.py`` is its registration: ``STAGES`` is every one of them,
    in the order of the source (flow order), and no list names them again."""
    tree = ast.parse((CORE / "topology.py").read_text())
    declared = [node.targets[0].id for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", "") == "StageSpec" and isinstance(node.targets[0], ast.Name)]
    assert [getattr(topology, name) for name in declared] == list(STAGES)
    assert [spec.name for spec in STAGES][:5] == ["reflect", "batch", "aggregate", "reduce", "control"]


def test_a_stage_declared_twice_is_refused_at_import():
    with pytest.raises(ValueError, match="declared twice"):
        topology._declared_stages({"REFLECT": topology.REFLECT, "ALSO_REFLECT": topology.REFLECT})


def test_the_worker_finds_each_binding_by_its_stage_s_name_and_says_what_is_missing():
    assert {spec.name: binding_module(spec) for spec in STAGES}["ingest-otlp"] == "streams.topology.stages.ingest_otlp"
    modules = {f"{worker.bindings.__name__}.{path.stem}" for path in BINDINGS.glob("*.py") if path.stem != "__init__"}
    assert modules == {binding_module(spec) for spec in STAGES}, "a module in stages/ that binds no declared stage"
    with pytest.raises(ImportError, match=r"'un-bound' .* has no binding: add streams/topology/stages/un_bound\.py"):
        worker._binding(StageSpec("un-bound", consumes=(Topic.METRICS,), produces=(Topic.DLQ,)))
    with pytest.raises(ImportError, match="exactly one Stage subclass with that spec in .*reflect, found 0"):
        worker._binding(StageSpec("reflect", consumes=(Topic.TRACES,), produces=(Topic.DLQ,)))


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


NEW_STAGE = {
    "combee_core/tally/__init__.py": '"""The tally stage: counts the batches whose metrics it reads."""\n',
    "combee_core/tally/processor.py": '''"""Count a batch's metrics and acknowledge them."""

from combee_core.models import BatchMetrics
from combee_core.processors.effects import Acknowledge, Count, Effect


def tally(metrics: BatchMetrics, token: object) -> list[Effect]:
    return [Count("batches_tallied"), Acknowledge((token,))]
''',
    "streams/topology/stages/tally.py": '''"""Tally: batch metrics -> a counter."""

from aiokafka.structs import ConsumerRecord

from combee_core.models import BatchMetrics
from combee_core.tally.processor import tally
from combee_core.topology import TALLY
from streams.topology.effects import perform
from streams.topology.runtime import Stage


class TallyStage(Stage):
    spec = TALLY

    async def handle(self, record: ConsumerRecord, metrics: BatchMetrics) -> None:
        await perform(self, tally(metrics, record))
''',
}
DECLARATION = 'TALLY = StageSpec("tally", consumes=(Topic.METRICS,), produces=(Topic.DLQ,))\n'
COPIED = ("combee_core", "streams", "tests", "docs", "deploy", "schemas", "docker-compose.yml", "pyproject.toml")
CHECKS = ("tests/unit/test_adding_a_stage.py", "tests/unit/test_topology_declaration.py",
          "tests/unit/test_module_names.py", "tests/unit/test_bad_records.py")
"""The checks run on the tree with the new stage: the declaration's consistency, the registries derived from it,
the bindings, module names, a bad record of its input dead-lettered. Left out: the deploy files' own checks
(``tests/unit/test_deploy_static.py``: the deploy files are kept by hand) and two scans of every module for what a
stage's files cannot add (a hand-written list of the stages, a topic named by a string)."""
NOT_RUN = ("test_a_new_stage_is_one_core_package_one_binding_and_one_declaration_line",
           "test_no_product_module_lists_the_stages_by_hand", "test_no_module_names_a_topic_by_a_string_literal")
ABOUT_KEPT_BY_HAND = {"test_every_file_kept_by_hand_names_every_stage", "test_the_map_table_is_the_declaration"}
"""The checks that fail until the files :data:`KEPT_BY_HAND` lists name the new stage."""


def _changed(original: Path, copy: Path) -> list[str]:
    """The files of ``copy`` that differ from ``original``'s or are new (caches left out)."""
    changed = []
    for path in sorted(copy.rglob("*")):
        relative = path.relative_to(copy)
        if path.is_file() and "__pycache__" not in relative.parts and relative.parts[0] in COPIED:
            if not (original / relative).is_file() or not filecmp.cmp(path, original / relative, shallow=False):
                changed.append(str(relative))
    return changed


def test_a_new_stage_is_one_core_package_one_binding_and_one_declaration_line(tmp_path):
    """Add a stage to a copy of the tree: its package, its binding and one line in the declaration. The worker runs
    it and every check of the declaration passes, but the ones about the files kept by hand, whose message names
    exactly those files: nothing else changes."""
    tree = tmp_path / "tree"
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tree / name)
    for name, text in NEW_STAGE.items():
        (tree / name).parent.mkdir(exist_ok=True)
        (tree / name).write_text(text)
    declaration = tree / "combee_core" / "topology.py"
    source = declaration.read_text()
    after = "\n\n\ndef _declared_stages("
    assert source.count(after) == 1
    declaration.write_text(source.replace(after, "\n" + DECLARATION.rstrip("\n") + after))
    assert _changed(ROOT, tree) == ["combee_core/tally/__init__.py", "combee_core/tally/processor.py",
                                    "combee_core/topology.py", "streams/topology/stages/tally.py"]
    diff = difflib.ndiff(source.splitlines(keepends=True), declaration.read_text().splitlines(keepends=True))
    assert [line for line in diff if line[0] in "+-"] == ["+ " + DECLARATION]

    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", *CHECKS, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={report}", "-k", " and ".join(f"not {name}" for name in NOT_RUN)],
                   cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, timeout=600)
    cases = list(ElementTree.parse(report).getroot().iter("testcase"))
    failed = {case.get("name", "").split("[")[0]: case.find("failure") for case in cases
              if case.find("failure") is not None or case.find("error") is not None}
    assert len(cases) > 40 and "test_bad_records" in {case.get("classname", "").split(".")[-1] for case in cases}
    assert set(failed) == ABOUT_KEPT_BY_HAND, {name: (f.get("message") if f is not None else "error")
                                               for name, f in failed.items()}
    listed = getattr(failed["test_every_file_kept_by_hand_names_every_stage"], "attrib", {}).get("message", "")
    assert re.findall(r"^ *(\S+): add \['tally'\]", listed, re.MULTILINE) == list(KEPT_BY_HAND), listed
