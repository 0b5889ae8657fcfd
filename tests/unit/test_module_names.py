"""A module name says one thing (docs/architecture.md, "The map"). Two modules of the product (``combee_core``,
``streams``, ``combee_client``) share a name only when they are one concept at two layers, which their imports show
(one imports the other or a module of the other's package: the wire model and its rule, the rule and its binding,
a command and what it runs; or both build on the ``combee_core`` package of that name: ``combee promote`` and the
promote stage's binding), or when the name is a role every package may have (:data:`ROLE_NAMES`). Two modules
called ``settings`` or ``server`` for different things fail here."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

from combee_core.topology import STAGES
from tests.unit.import_scan import imported_modules

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("combee_core", "streams", "combee_client")

ROLE_NAMES = {
    "__init__": "a package",
    "processor": "a stage's processor, in the stage's package (combee_core/<StageSpec.core>/)",
    "errors": "a package's exception types",
}

KNOWN: dict[str, str] = {}
"""Repeats left, each with why and what would end it; the test fails when one ends, so the list only shrinks."""


def _module(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)



def repeated_names(root: Path, packages: tuple[str, ...] = PRODUCT) -> dict[str, list[tuple[str, str]]]:
    """Module name -> the pairs of modules with that name that no import relates (role names left out)."""
    modules = {_module(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}
    imports = {name: imported_modules(path) for name, path in modules.items()}
    package_of = {name: name.rpartition(".")[0] for name in modules}

    def relates(a: str, b: str) -> bool:
        return any(imported in (b, package_of[b]) or (imported in modules and package_of[imported] == package_of[b])
                   for imported in imports[a])

    def build_on_the_core_package_so_named(a: str, b: str) -> bool:
        core = f"combee_core.{a.rpartition('.')[2]}"
        return all(any(i == core or i.startswith(f"{core}.") for i in imports[m]) for m in (a, b))

    by_name: dict[str, list[str]] = defaultdict(list)
    for name in modules:
        by_name[name.rpartition(".")[2]].append(name)
    repeats = {}
    for name, found in sorted(by_name.items()):
        pairs = [(a, b) for a, b in itertools.combinations(found, 2)
                 if not (relates(a, b) or relates(b, a) or build_on_the_core_package_so_named(a, b))]
        if pairs and name not in ROLE_NAMES:
            repeats[name] = pairs
    return repeats


def test_no_module_name_is_used_for_two_things():
    repeats = repeated_names(ROOT)
    new = {name: pairs for name, pairs in repeats.items() if name not in KNOWN}
    assert new == {}, "a module name used for two things: name one of them for what it is"
    assert sorted(repeats) == sorted(KNOWN), "a known repeat is gone: take it out of KNOWN"


def test_a_processor_module_is_a_declared_stages_processor():
    processors = sorted(str(path.parent.relative_to(ROOT / "combee_core"))
                        for path in (ROOT / "combee_core").rglob("processor.py"))
    assert processors == sorted(spec.core for spec in STAGES)


def test_the_scan_finds_a_name_used_for_two_things(tmp_path):
    for path, text in {"combee_core/judge/settings.py": "", "combee_core/settings.py": "",
                       "streams/a/server.py": "", "streams/b/server.py": "",
                       "streams/cli/worker.py": "from streams.topology.worker import run\n",
                       "streams/topology/worker.py": "", "streams/x/processor.py": "",
                       "streams/y/processor.py": "", "combee_core/promote/rule.py": "",
                       "streams/cli/promote.py": "from combee_core.promote.rule import x\n",
                       "streams/stages/promote.py": "from combee_core.promote import rule\n",
                       "streams/other/promote.py": ""}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert repeated_names(tmp_path, ("combee_core", "streams")) == {
        "promote": [("streams.cli.promote", "streams.other.promote"),
                    ("streams.other.promote", "streams.stages.promote")],
        "server": [("streams.a.server", "streams.b.server")],
        "settings": [("combee_core.judge.settings", "combee_core.settings")],
    }
