"""Every ``from <module> import <name>`` of the project's own modules takes the name from the module that defines
it, not from one that merely imports it (a re-export): moving a name then breaks at its real users, and a module's
imports say where things live. Packages (``__init__.py``) may re-export: that is their public face."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("combee_core", "streams", "bench", "tests")


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module defines at top level (also inside top-level ``if``/``try`` blocks), imports excluded."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With):
            todo += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                todo += handler.body
    return names


def module_file(module: str, root: Path) -> Path | None:
    """The file of a first-party module that is not a package, or None."""
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def borrowed_imports(root: Path) -> list[str]:
    found = []
    definitions: dict[Path, set[str]] = {}
    for path in sorted(p for d in FIRST_PARTY for p in (root / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in FIRST_PARTY:
                continue
            source = module_file(node.module, root)
            if source is None:
                continue
            if source not in definitions:
                definitions[source] = defined_names(ast.parse(source.read_text(), str(source)))
            for alias in node.names:
                if alias.name != "*" and alias.name not in definitions[source]:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {alias.name} from {node.module}")
    return found


def test_no_module_imports_a_name_from_a_module_that_does_not_define_it():
    borrowed = borrowed_imports(ROOT)
    assert borrowed == [], "import each name from the module that defines it:\n" + "\n".join(borrowed)


def test_the_scan_finds_a_borrowed_name(tmp_path):
    package = tmp_path / "streams"
    package.mkdir()
    (package / "__init__.py").write_text("from streams.home import thing\n")
    (package / "home.py").write_text("thing = 1\n")
    (package / "relay.py").write_text("from streams.home import thing\n")
    (package / "user.py").write_text("from streams.relay import thing\nfrom streams import thing\n"
                                     "from streams.home import thing as same\n")
    assert borrowed_imports(tmp_path) == ["streams/user.py:1: thing from streams.relay"]


def test_combee_core_is_grouped_in_packages_that_hold_only_their_docstring():
    """Beside its packages (one per step of the flow, docs/architecture.md "combee_core, module by module"),
    combee_core keeps only the modules every part shares; a package of the flow re-exports nothing."""
    core = ROOT / "combee_core"
    shared = sorted(path.stem for path in core.glob("*.py"))
    assert len(shared) <= 12, shared
    for package in ("ingest", "batch", "reduce", "control", "promote", "serve", "sim", "runs", "llm", "partitions"):
        init = ast.parse((core / package / "__init__.py").read_text())
        assert [type(node) for node in init.body] == [ast.Expr], f"combee_core/{package}/__init__.py"
