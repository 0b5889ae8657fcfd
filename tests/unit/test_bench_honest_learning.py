"""bench/honest_learning.py: the copying controls score what the simulator says they should (the empty playbook's
accuracy) through the real curation, the verdicts use the margins fixed in docs/simulator.md, and the scripted
reducer stand-ins answer as documented."""

from __future__ import annotations

import asyncio

from bench import honest_learning as bench
from bench.reducer_standins import scripted_operations
from combee_core.models import AddOp, TagOp
from combee_core.sim import honest_suite
from combee_core.sim.sim_registry import registry_for
from combee_core.sim.task_suite import build_suite

SUITE = build_suite(seed=7, feedback="honest")
REGISTRY = registry_for(7, 24)
EMPTY = round(honest_suite.expected_accuracy(SUITE, SUITE.held_out, []), 4)


def test_the_issue_38_copier_run_scores_the_empty_playbook():
    """Through the fleet, the aggregator and the stage's reducer processor: the copier that passed before (feedback
    lines minus five prefixes) learns entries, none states a rule, so held-out accuracy is the empty playbook's, as
    the simulator says (the other controls: tests/unit/test_honest_mode.py, without a run)."""
    row = asyncio.run(bench.one("copy minus 5 prefixes (control)", 6, 0, traces=200, budget=1000))
    assert row["entries"] > 0 and row["unknown"] == row["entries"]
    assert (row["families_right"], row["families_wrong"], row["held_out_accuracy"]) == (0, 0, EMPTY)
    assert row["feedback_lines_credited"] == 0


def _row(variant: str, acc: float) -> dict:
    keys = ["entries", "lessons", "entries_per_lesson", "families_right", "families_wrong", "families_both",
            "unknown", "evictions", "aggregator_calls_per_version", "calls_per_version", "wrong_lesson_rate",
            "versions_over_budget", *bench.SURPLUS]
    return {"variant": variant, "capacity": 6, "seed": 0, "held_out_accuracy": acc, "tokens_max": 900,
            "within_budget": True, "versions": 10, "fan_in": 6, **dict.fromkeys(keys, 1)}


def test_verdicts_use_the_margins_fixed_before_the_run():
    rows = [_row("sequential", 0.90), _row("combee", 0.90), _row("copy verbatim (control)", 0.80),
            _row("echo nouns (control)", 0.81), _row("reducer stand-in: union", 0.89),
            _row("reducer stand-in: drop-all", 0.88)]
    verdicts = {r["variant"]: (r["control_fails"], r["not_worse_than_judge"]) for r in bench.summarise(rows)}
    assert verdicts["copy verbatim (control)"] == (True, None)  # 10 points below combee
    assert verdicts["echo nouns (control)"] == (False, None)  # 9 points: within the margin, so it does not fail
    assert verdicts["reducer stand-in: union"] == (None, True)
    assert verdicts["reducer stand-in: drop-all"] == (None, False)
    assert verdicts["combee"] == (None, None)


def test_stand_ins_are_held_to_the_judge_alone_row_when_it_ran():
    """The issue's baseline is the judge alone (no reducer call); combee's simulated reducer call is not it."""
    rows = [_row("sequential", 0.90), _row("combee", 0.95), _row(bench.JUDGE_ALONE, 0.90),
            _row("reducer stand-in: union", 0.89), _row("reducer stand-in: drop-all", 0.88)]
    verdicts = {r["variant"]: r["not_worse_than_judge"] for r in bench.summarise(rows)}
    assert verdicts == {"sequential": None, "combee": None, bench.JUDGE_ALONE: None,
                        "reducer stand-in: union": True, "reducer stand-in: drop-all": False}


def _add(content: str, support: int = 1, section: str = "dates") -> AddOp:
    return AddOp(section=section, content=content, support=support)


def test_reducer_standins_answer_as_documented():
    fam, other = SUITE.families[0].family_id, SUITE.families[6].family_id
    right, right2 = REGISTRY.wordings[(fam, 1)][0], REGISTRY.wordings[(fam, 1)][7]
    wrong = REGISTRY.wordings[(fam, -1)][3]
    distinct = REGISTRY.wordings[(other, 1)][0]
    tag = TagOp(entry_id="e1", tag="helpful", count=2)
    children = [[_add(right), tag], [_add(right2, 2), _add(wrong)], [_add(distinct), _add(right)]]

    def adds(name: str) -> list[tuple[str, int]]:
        return [(op.content, op.support) for op in scripted_operations(name, REGISTRY, children)
                if isinstance(op, AddOp)]

    assert scripted_operations("drop-all", REGISTRY, children) == []
    assert adds("union") == [(right, 2), (right2, 2), (wrong, 1), (distinct, 1)]
    assert adds("merge-all") == [(right, 6)]
    assert adds("oracle") == [(right, 4), (distinct, 1)]
    assert adds("adversarial") == [(wrong, 2)]  # the opposite kept, and merged with the other family's rule
    assert tag in scripted_operations("oracle", REGISTRY, children)


def test_a_pipelined_variant_is_its_variant_with_context_lag_1():
    """Issue 44: ``X pipelined`` runs X with the production default lag 1; the other rows keep lag 0."""
    from bench.honest_learning import VARIANTS, variant_spec

    assert variant_spec("combee pipelined") == VARIANTS["combee"]
    assert variant_spec("combee bs 160 pipelined").batch == 160
