"""The simulator stays out of the production path: no production module imports ``combee_core.sim`` (the synthetic
task suite) but the simulator's own entry points, listed here. Read from the source (ast), so imports inside
functions count too. Promotion scores held-out task sets registered as data (``combee tasks add``), never the suite
directly."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("combee_core", "streams", "combee_client")

SIM_ENTRY_POINTS = {
    "combee_core/llm/honest.py": "the simulated reflector's honest mode reads the suite's instances",
    "combee_core/evaluate/processor.py": "the built-in evaluator scores the suite's success probability",
    "streams/topology/stages/evaluate.py": "the built-in evaluate stage registers the suite as the task set 'suite'",
    "streams/demo/fleet.py": "the demo's simulated agents run the suite's tasks",
    "streams/demo/run.py": "the demo registers the suite and runs its fleet",
    "streams/demo/results.py": "the demo reports the suite's expected accuracy",
}
"""Production modules allowed to import ``combee_core.sim``, and why (the demo and the simulator-specific parts)."""

ALLOWED_PACKAGES = ("combee_core/sim/", "streams/testing/")
"""The simulator itself, and the test harness (not the product)."""


def _imports_sim(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name == "combee_core.sim" or a.name.startswith("combee_core.sim.")
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module is not None and (
                node.module == "combee_core.sim" or node.module.startswith("combee_core.sim.")
                or (node.module == "combee_core" and any(a.name == "sim" for a in node.names))):
            return True
    return False


def _sim_importers() -> set[str]:
    found = set()
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(ALLOWED_PACKAGES) and _imports_sim(path):
                found.add(relative)
    return found


def test_no_production_module_but_the_listed_entry_points_imports_the_simulator():
    stray = sorted(_sim_importers() - set(SIM_ENTRY_POINTS))
    assert stray == [], f"production modules importing combee_core.sim: {stray} (score task sets, not the suite)"


def test_the_promoter_and_the_promotion_rule_score_task_sets_not_the_suite():
    """The modules the issue named: the promoter's stage, processor, rule and cache."""
    for module in ("streams/topology/stages/promote.py", "combee_core/promote/processor.py",
                   "combee_core/promote/promotion.py", "combee_core/promote/score_cache.py"):
        assert not _imports_sim(ROOT / module), module


def test_every_listed_entry_point_exists_and_still_needs_the_simulator():
    """A stale entry of the list would let a new importer in under its name."""
    assert sorted(p for p in SIM_ENTRY_POINTS if not _imports_sim(ROOT / p)) == []
