"""The promotion rule, the ledger's reading rule, the score cache and what the next version is built on."""

from datetime import datetime, timezone

import pytest

from combee_core.models import (
    EvalResult,
    HeldOutTask,
    PlaybookEntry,
    PlaybookVersion,
    ProposerModels,
    Usage,
    VersionStats,
    entries_digest,
)
from combee_core.promote.improvement_cost import CandidateCost
from combee_core.promote.promotion import (
    PromotionError,
    PromotionLedger,
    PromotionRule,
    ScoreCache,
    built_on_rejected,
    canary_verdict,
    compare_decisions,
    decide,
    eval_requests,
    in_canary,
    next_base,
    operator_decision,
    rollback_target,
)
from combee_core.promote.task_sets import pinned_tasks
from combee_core.sim.task_suite import build_suite
from tests.unit.test_promoter_resume import task_set

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
PROPOSER = ProposerModels(reflector="sim/r", aggregator="sim/a", reducer="sim/d")


def _version(n: int, texts: list[str], cost: float = 0.01) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{i}", section="tools", content=t, created_version=1, updated_version=1)
               for i, t in enumerate(texts)]
    return PlaybookVersion(playbook_id="pb", version=n, parent_version=n - 1, batch_id=n - 1, entries=entries,
                           next_entry_number=len(texts) + 1, operations=[], lineage=[f"t{n}a", f"t{n}b"],
                           stats=VersionStats(batch_size=2, k=1, p=1, llm_calls=3, prompt_tokens=100,
                                              completion_tokens=10, cost_usd=cost),
                           content_hash=f"{n:064x}", published_at=NOW)


RULE = PromotionRule(0.01)


def _decide(ledger, candidate, score, incumbent_score, rule=RULE):
    return decide(rule, ledger, candidate, candidate_score=score, incumbent_score=incumbent_score,
                  costs=[CandidateCost.of(candidate)], task_set="s", tasks=10, proposer=PROPOSER,
                  evaluator_model="sim/eval", now=NOW)


def test_a_candidate_within_epsilon_is_promoted_with_its_cost_per_point_and_a_worse_one_is_rejected():
    ledger = PromotionLedger()
    first = _decide(ledger, _version(1, ["a"]), 0.60, 0.40)
    assert first.action == "promote" and first.served_version == 1 and first.served.version == 1
    assert first.cost.gain_points == pytest.approx(20.0) and first.cost.cost_usd_per_point == pytest.approx(0.0005)
    assert first.proposer == PROPOSER and first.evaluator_model == "sim/eval" and "0.01" in first.rule
    assert ledger.apply(first)
    within = _decide(ledger, _version(2, ["a", "b"]), 0.595, 0.60)
    assert within.action == "promote" and within.cost.cost_usd_per_point is None  # no gain, no price per point
    worse = _decide(ledger, _version(2, ["a", "bad"]), 0.50, 0.60)
    assert worse.action == "reject" and worse.served_version == 1 and worse.served.version == 1
    assert "learning continues from v1" in worse.reason


def test_the_first_record_of_each_decision_id_counts():
    ledger = PromotionLedger()
    first = _decide(ledger, _version(1, ["a"]), 0.6, 0.4)
    zombie = _decide(ledger, _version(1, ["a"]), 0.1, 0.4)  # same id, written second
    assert ledger.apply(first) and not ledger.apply(zombie)
    assert ledger.decision_on("pb", 1).action == "promote" and ledger.next_id("pb") == 1


def test_the_next_version_is_built_on_the_served_version_never_on_a_rejected_candidate():
    ledger = PromotionLedger()
    assert next_base(ledger, "pb", 0).entries is None
    assert next_base(ledger, "pb", 1) is None  # v1 awaits its decision: the reducer waits
    ledger.apply(_decide(ledger, _version(1, ["a"]), 0.6, 0.4))
    assert next_base(ledger, "pb", 1).entries is None and next_base(ledger, "pb", 1).parent_version == 1
    ledger.apply(_decide(ledger, _version(2, ["a", "bad"]), 0.2, 0.6))
    base = next_base(ledger, "pb", 2)
    assert base.parent_version == 1 and [e.content for e in base.entries] == ["a"]


def test_a_rollback_serves_the_earlier_version_and_pauses_automatic_promotion_until_an_operator_promotes():
    ledger = PromotionLedger()
    v1, v2 = _version(1, ["a"]), _version(2, ["a", "b"])
    ledger.apply(_decide(ledger, v1, 0.6, 0.4))
    ledger.apply(_decide(ledger, v2, 0.7, 0.6))
    assert rollback_target(ledger, "pb") == 1
    rollback = operator_decision(ledger, "rollback", v1, playbook_id="pb", by="ann@host", why="bad answers",
                                 rule=PromotionRule(), now=NOW)
    assert ledger.apply(rollback) and ledger.served_version("pb") == 1 and ledger.paused("pb")
    assert "ann@host rolled back to v1: bad answers" == rollback.reason
    held = _decide(ledger, _version(3, ["a", "b", "c"]), 0.9, 0.6)
    assert held.action == "hold" and held.served_version == 1
    ledger.apply(held)
    assert next_base(ledger, "pb", 3).parent_version == 1
    resumed = operator_decision(ledger, "operator-promote", v2, playbook_id="pb", by="ann@host", why="",
                                rule=PromotionRule(), now=NOW)
    assert ledger.apply(resumed) and not ledger.paused("pb") and ledger.served_version("pb") == 2
    with pytest.raises(PromotionError):
        rollback_target(PromotionLedger(), "pb")


def test_the_cache_scores_a_content_once_per_task_and_a_failed_evaluation_rejects():
    suite = build_suite(families=3, held_out_per_family=2, seed=7)
    held_out = pinned_tasks(task_set("s", [HeldOutTask(task_id=t.task_id, input=t.prompt) for t in suite.held_out]))
    entries = list(_version(1, ["a"]).entries)
    requests = eval_requests("pb", 1, entries, held_out, NOW)
    assert len({r.request_id for r in requests}) == len(held_out) == 6
    assert {r.task_set for r in requests} == {"s@1"}
    cache = ScoreCache()
    digest = entries_digest(entries)
    assert cache.missing(digest, held_out) == list(held_out)
    for i, task in enumerate(held_out):
        result = EvalResult(request_id="r", playbook_id="pb", digest=digest, task_id=task.task_id, score=i / 10,
                            evaluator="t", evaluator_model="m", evaluated_at=NOW)
        assert cache.add(result) and not cache.add(result)
    assert cache.score(digest, held_out) == (pytest.approx(0.25), "", "m")
    assert cache.missing(entries_digest(list(_version(7, ["a"]).entries)), held_out) == []  # same text
    ledger = PromotionLedger()
    failed = decide(PromotionRule(), ledger, _version(1, ["a"]), candidate_score=None, incumbent_score=0.3,
                    error="task R00-020: timeout", costs=[], task_set="s", tasks=6, proposer=PROPOSER,
                    evaluator_model="m", now=NOW)
    assert failed.action == "reject" and "timeout" in failed.reason


def test_a_candidates_cost_adds_its_batchs_reflections_when_the_manifest_says_what_they_cost():
    version = _version(1, ["a"], cost=0.01)
    assert CandidateCost.of(version) == CandidateCost(1, 2, 3, 100, 10, 0.01)
    reflected = Usage(prompt_tokens=50, completion_tokens=5, cost_usd=0.002, calls=2)
    assert CandidateCost.of(version).plus(reflected) == CandidateCost(1, 2, 5, 150, 15, 0.012)
    assert CandidateCost.of(version).plus(None) == CandidateCost.of(version)


def test_the_decision_hash_ignores_only_the_time():
    ledger = PromotionLedger()
    a = _decide(ledger, _version(1, ["a"]), 0.6, 0.4)
    b = a.model_copy(update={"decided_at": datetime(2027, 1, 1, tzinfo=timezone.utc)})
    c = a.model_copy(update={"reason": "other"})
    assert a.decision_hash() == b.decision_hash() != c.decision_hash()


CANARY = PromotionRule(epsilon=0.01, canary_share=0.5, canary_min_traces=3)


def test_with_a_canary_a_held_out_pass_starts_a_canary_that_agents_in_its_share_run_and_learning_builds_on():
    ledger = PromotionLedger()
    v1 = _version(1, ["a"])
    started = _decide(ledger, v1, 0.6, 0.4, rule=CANARY)
    assert started.action == "canary" and started.served_version == 0 and started.canary == v1
    assert "canary (0.5 of agents)" in started.rule
    ledger.apply(started)
    assert ledger.canary("pb") == v1 and ledger.served_version("pb") == 0
    assert next_base(ledger, "pb", 1).entries is None  # built on, tentatively
    members = [a for a in (f"agent{i:03d}" for i in range(200)) if in_canary(a, 0.5)]
    assert 70 < len(members) < 130 and members == [a for a in (f"agent{i:03d}" for i in range(200))
                                                  if in_canary(a, 0.5)]
    assert not _decide(ledger, v1, 0.3, 0.4, rule=CANARY).action == "canary"  # a held-out fail never canaries


def test_the_canary_verdict_counts_the_first_scored_traces_of_each_side_in_log_order():
    ledger = PromotionLedger()
    v1 = _version(1, ["a"])
    ledger.apply(_decide(ledger, v1, 0.6, 0.4, rule=CANARY))
    before = [(0, 1.0), (0, 1.0)]  # incumbent traces before the canary's first: not counted
    live = before + [(1, 1.0), (0, 0.0), (1, None), (1, 1.0), (0, 0.0)]
    assert canary_verdict(CANARY, ledger, "pb", live, costs=[], now=NOW) is None  # 2 canary traces so far
    live += [(1, 0.0), (0, 1.0), (1, 0.0), (0, 1.0)]
    verdict = canary_verdict(CANARY, ledger, "pb", live, costs=[CandidateCost.of(v1)], now=NOW)
    assert verdict.action == "promote" and verdict.served_version == 1  # 2/3 vs 1/3
    assert verdict.canary_score == pytest.approx(2 / 3) and verdict.canary_incumbent_score == pytest.approx(1 / 3)
    assert verdict.canary_traces == 3 and verdict.cost.gain_points == pytest.approx(20.0)
    later = canary_verdict(CANARY, ledger, "pb", live + [(1, 0.0)] * 5, costs=[CandidateCost.of(v1)], now=NOW)
    assert later.decision_hash() == verdict.decision_hash()  # later traces change nothing: the first ones count


def test_a_failed_canary_rejects_the_candidate_and_the_version_built_on_it_and_learning_returns_to_the_incumbent():
    ledger = PromotionLedger()
    v1 = _version(1, ["a"])
    ledger.apply(_decide(ledger, v1, 0.6, 0.4, rule=CANARY))
    live = [(1, 0.0), (0, 1.0), (1, 0.0), (0, 1.0), (1, 0.0), (0, 1.0)]
    verdict = canary_verdict(CANARY, ledger, "pb", live, costs=[], now=NOW)
    assert verdict.action == "reject" and verdict.served_version == 0 and "the canary fails" in verdict.reason
    ledger.apply(verdict)
    v2 = _version(2, ["a", "b"])  # built on v1 while its canary ran
    orphan = built_on_rejected(ledger, v2, now=NOW, rule=CANARY)
    assert orphan.action == "reject" and orphan.served_version == 0 and "built on v1" in orphan.reason
    ledger.apply(orphan)
    base = next_base(ledger, "pb", 2)
    assert base.parent_version == 0 and base.entries == []
    v3 = _version(3, ["c"]).model_copy(update={"parent_version": 0})
    assert built_on_rejected(ledger, v3, now=NOW, rule=CANARY) is None


def test_a_rejected_candidate_that_an_operator_promotes_is_built_on_and_what_is_built_on_it_is_evaluated():
    """Before: once learning reached the promoted version, the next candidate was rejected unevaluated as "built on
    v1, which was rejected", and that reject served v0 again, undoing the operator's promotion."""
    ledger = PromotionLedger()
    ledger.apply(_decide(ledger, _version(1, ["a"]), 0.3, 0.4))  # rejected: v0 stays served
    ledger.apply(operator_decision(ledger, "operator-promote", _version(1, ["a"]), playbook_id="pb", by="ann@host",
                                   why="trusted", rule=PromotionRule(), now=NOW))
    v2 = _version(2, ["b"]).model_copy(update={"parent_version": next_base(ledger, "pb", 1).parent_version})
    ledger.apply(_decide(ledger, v2, 0.1, 0.3))  # built on the base the first decision on v1 fixed; rejected
    assert ledger.served_version("pb") == 1
    v3 = _version(3, ["a", "c"]).model_copy(update={"parent_version": next_base(ledger, "pb", 2).parent_version})
    assert v3.parent_version == 1  # learning continues from the promoted version
    assert built_on_rejected(ledger, v3, now=NOW, rule=RULE) is None
    decision = _decide(ledger, v3, 0.5, 0.3)
    assert decision.action == "promote" and decision.served_version == 3


def test_replayed_decisions_compare_field_for_field_but_the_time_and_operators_are_left_out():
    ledger = PromotionLedger()
    first = _decide(ledger, _version(1, ["a"]), 0.6, 0.4)
    ledger.apply(first)
    rollback = operator_decision(ledger, "rollback", None, playbook_id="pb", by="ann@host", why="",
                                 rule=PromotionRule(), now=NOW)
    later = first.model_copy(update={"decided_at": datetime(2027, 1, 1, tzinfo=timezone.utc)})
    assert compare_decisions([first, rollback], [later]) is None
    other = first.model_copy(update={"action": "reject", "served_version": 0, "served": None})
    assert "recorded promote" in compare_decisions([first], [other]) and "replayed reject" in \
        compare_decisions([first], [other])
    assert compare_decisions([first], []) == "the replay made no promotion decision"

