"""The live-trace guard: the sequential test (its false-alarm rate and power measured by simulation), which version
is served and built on after a rollback, and the processor's decisions."""

import random
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.guard.processor import Guard
from combee_core.guard.rule import (
    GUARD,
    GuardRule,
    Sample,
    alarms,
    clean,
    guarded_base,
    msprt_log_lr,
    served_without_promotion,
)
from combee_core.models import PlaybookEntry, PlaybookVersion, PromotionDecision, VersionStats
from combee_core.playbook import Playbook
from combee_core.processors.effects import Count, Publish
from combee_core.promote.promotion import PromotionLedger, PromotionRule, operator_decision

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
RULE = GuardRule(alpha=0.05, tau=0.2, min_traces=30)


def sample(values) -> Sample:
    s = Sample()
    for value in values:
        s.add(float(value))
    return s


def version(n: int, parent: int | None = None, texts: tuple[str, ...] = ("a",)) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{n}-{i}", section="tools", content=f"{t} {n}", created_version=n,
                             updated_version=n) for i, t in enumerate(texts)]
    return PlaybookVersion(playbook_id="pb", version=n, parent_version=n - 1 if parent is None else parent,
                           batch_id=n - 1, entries=entries, next_entry_number=10 * n, operations=[], lineage=[],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=f"{n:064x}", published_at=NOW)


def first_crossing(rule: GuardRule, rng: random.Random, p_parent: float, p_child: float, n_parent: int,
                   n_child: int) -> int | None:
    """Parent traces first, then child traces one at a time: the child trace at which the guard alarms."""
    parent = sample(rng.random() < p_parent for _ in range(n_parent))
    child = Sample()
    for i in range(n_child):
        child.add(float(rng.random() < p_child))
        if alarms(rule, child, parent):
            return i + 1
    return None


# ---------------------------------------------------------------------------------------------- the test


def test_the_likelihood_ratio_grows_with_the_drop_and_the_evidence():
    parent = sample([1] * 80 + [0] * 20)
    small, large = sample([1] * 70 + [0] * 30), sample([1] * 40 + [0] * 60)
    assert msprt_log_lr(large, parent, 0.2) > msprt_log_lr(small, parent, 0.2)
    assert msprt_log_lr(sample([1] * 140 + [0] * 60), sample([1] * 160 + [0] * 40), 0.2) > \
        msprt_log_lr(sample([1] * 70 + [0] * 30), parent, 0.2)
    assert msprt_log_lr(sample([1] * 80 + [0] * 20), parent, 0.2) < 0  # no difference: evidence for none
    assert msprt_log_lr(Sample(), parent, 0.2) == 0 and msprt_log_lr(sample([1] * 50), sample([1] * 50), 0.2) == 0


def test_only_a_drop_after_the_minimum_traces_alarms():
    parent = sample([1] * 90 + [0] * 10)
    assert alarms(RULE, sample([1] * 10 + [0] * 30), parent)
    assert not alarms(RULE, sample([1] * 10 + [0] * 19), parent), "fewer than min_traces"
    assert not alarms(RULE, parent, sample([1] * 10 + [0] * 30)), "an improvement never alarms"
    assert not alarms(RULE, sample([1] * 10 + [0] * 30), sample([1] * 27 + [0] * 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=0, max_size=120), st.lists(st.booleans(), min_size=0, max_size=120),
       st.floats(0.001, 0.5), st.floats(0.01, 2.0), st.integers(2, 60))
def test_no_alarm_without_a_drop_or_before_enough_traces(child, parent, alpha, tau, min_traces):
    rule = GuardRule(alpha=alpha, tau=tau, min_traces=min_traces)
    c, p = sample(child), sample(parent)
    if alarms(rule, c, p):
        assert c.mean < p.mean and c.n >= min_traces and p.n >= min_traces
        assert msprt_log_lr(c, p, tau) >= rule.threshold


@pytest.mark.parametrize("p_success", [0.3, 0.5, 0.8, 0.95])
def test_false_alarm_rate_without_a_difference_is_below_alpha(p_success):
    """Simulated: a child as good as its parent, followed for 300 traces against 100 of the parent's."""
    rng = random.Random(int(p_success * 100))
    runs = 400
    alarmed = sum(first_crossing(RULE, rng, p_success, p_success, 100, 300) is not None for _ in range(runs))
    assert alarmed / runs <= RULE.alpha, f"{alarmed}/{runs} false alarms"


def test_power_against_a_drop_of_a_quarter():
    rng = random.Random(1)
    stops = [first_crossing(RULE, rng, 0.8, 0.55, 100, 300) for _ in range(200)]
    detected = [s for s in stops if s is not None]
    assert len(detected) / len(stops) >= 0.9
    assert sorted(detected)[len(detected) // 2] <= 60, "the median drop is found within 60 traces"


def test_rule_parameters_are_checked():
    for bad in (dict(alpha=0.0), dict(alpha=1.0), dict(tau=0.0), dict(min_traces=1)):
        with pytest.raises(ValueError):
            GuardRule(**bad)


# ---------------------------------------------------------------------------------------------- lineage


def rollback_of(judged: int, to: int, newest: int) -> PromotionDecision:
    return PromotionDecision(playbook_id="pb", decision_id=0, action="rollback", candidate_version=judged,
                             served_version=to, served=version(to) if to else None, previous_version=newest,
                             rule="r", reason="x", paused=True, by=GUARD, decided_at=NOW)


def ledger_of(*decisions: PromotionDecision) -> PromotionLedger:
    ledger = PromotionLedger()
    for decision in decisions:
        assert ledger.apply(decision)
    return ledger


def test_after_a_rollback_only_versions_built_on_the_target_are_clean():
    ledger = ledger_of(rollback_of(judged=5, to=4, newest=6))
    parents = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6, 8: 4, 9: 8}
    assert all(clean(v, ledger, "pb", parents) for v in (4, 8, 9))
    assert not clean(5, ledger, "pb", parents) and not clean(6, ledger, "pb", parents)
    assert not clean(7, ledger, "pb", parents), "built on v6 before the reducer saw the rollback"
    assert not clean(3, ledger, "pb", parents)
    assert clean(12, ledger, "pb", {}), "a version whose parent a checkpointed view no longer holds is newer"
    assert clean(3, PromotionLedger(), "pb", parents)


def test_what_agents_run_without_promotion():
    parents = {1: 0, 2: 1, 3: 2, 4: 2}
    rollback = rollback_of(judged=3, to=2, newest=3)
    assert served_without_promotion(PromotionLedger(), "pb", parents, 3) == 3
    assert served_without_promotion(ledger_of(rollback), "pb", parents, 4) == 2, "paused: the target"
    # the operator resumes by serving the target (what agents ran then: v2)
    resume = operator_decision(ledger_of(rollback), "operator-promote", version(2), playbook_id="pb", by="op", why="",
                               rule=PromotionRule(), now=NOW, running=2)
    resumed = ledger_of(rollback, resume)
    assert served_without_promotion(resumed, "pb", parents, 4) == 4, "resumed: the newest, built on the target"
    assert served_without_promotion(resumed, "pb", {1: 0, 2: 1, 3: 2}, 3) == 2, "never the rolled-back version"
    # `combee promote 2` with v4 on the log (it records the newest): v2 itself, until a version is built on it
    told = operator_decision(ledger_of(rollback), "operator-promote", version(2), playbook_id="pb", by="op", why="",
                             rule=PromotionRule(), now=NOW, running=2, newest=4)
    assert served_without_promotion(ledger_of(rollback, told), "pb", parents, 4) == 2
    assert served_without_promotion(ledger_of(rollback, told), "pb", {**parents, 5: 2}, 5) == 5
    # an operator's rollback to v5 while agents run v10 (no decision before): nothing after v5 runs again
    parents = {v: v - 1 for v in range(1, 11)}
    back = operator_decision(PromotionLedger(), "rollback", version(5), playbook_id="pb", by="op", why="",
                             rule=PromotionRule(), now=NOW, running=10)
    again = operator_decision(ledger_of(back), "operator-promote", version(5), playbook_id="pb", by="op", why="",
                              rule=PromotionRule(), now=NOW, running=5)
    assert served_without_promotion(ledger_of(back, again), "pb", parents, 10) == 5
    assert served_without_promotion(ledger_of(back, again), "pb", {**parents, 11: 5}, 11) == 11


def test_the_reducer_builds_on_the_target_until_a_clean_version_exists():
    ledger = ledger_of(rollback_of(judged=3, to=2, newest=3))
    bad = Playbook.from_entries("pb", 3, list(version(3).entries), 30)
    base, parent = guarded_base(bad, ledger, {1: 0, 2: 1, 3: 2})
    assert parent == 2 and [e.content for e in base.entries] == ["a 2"]
    assert base.version == 3 and base.next_entry_number == 30, "numbers and ids keep counting"
    good = Playbook.from_entries("pb", 4, list(version(4, parent=2).entries), 40)
    assert guarded_base(good, ledger, {1: 0, 2: 1, 3: 2, 4: 2}) == (good, None)
    assert guarded_base(good, PromotionLedger(), {}) == (good, None)


# ---------------------------------------------------------------------------------------------- the processor


def fed(guard: Guard, outcomes: dict[int, list[bool]]) -> None:
    for v, values in outcomes.items():
        for value in values:
            guard.observe("pb", v, float(value))
    guard.advance("pb")


def outcomes(rng: random.Random, p: float, n: int) -> list[bool]:
    return [rng.random() < p for _ in range(n)]


def test_a_harmful_version_is_rolled_back_to_its_parent_and_a_harmless_one_is_not():
    rng = random.Random(3)
    for p_child, expected in ((0.8, None), (0.4, 1)):
        guard = Guard(RULE)
        guard.apply_version(version(1))
        fed(guard, {0: outcomes(rng, 0.8, 60), 1: outcomes(rng, p_child, 60)})
        effects = guard.decide("pb", NOW)
        if expected is None:
            assert effects == [] and guard.alarm == {}
            continue
        publish, count = effects
        assert isinstance(publish, Publish) and count == Count("decisions.guard-rollback")
        decision = publish.value
        assert isinstance(decision, PromotionDecision)
        assert (decision.action, decision.by, decision.paused) == ("rollback", GUARD, True)
        assert decision.candidate_version == 1 and decision.served_version == 0 and decision.served is None
        assert decision.previous_version == 1 and publish.number == ("pb", 0)
        test = decision.live_test
        assert test is not None and test.version == 1 and test.parent_version == 0
        assert test.traces >= RULE.min_traces and test.mean < test.parent_mean and test.log_lr >= test.threshold
        assert "rolled back to v0" in decision.reason


def test_after_the_rollback_nothing_is_judged_until_an_operator_resumes():
    rng = random.Random(4)
    guard = Guard(RULE)
    for v in (1, 2):
        guard.apply_version(version(v))
    fed(guard, {1: outcomes(rng, 0.9, 60), 2: outcomes(rng, 0.3, 60)})
    decision = guard.decide("pb", NOW)[0].value
    assert decision.candidate_version == 2 and decision.served_version == 1 and decision.served.version == 1
    assert guard.apply_decision(decision) and guard.alarm == {}
    guard.apply_version(version(3, parent=1))
    fed(guard, {3: outcomes(rng, 0.1, 60)})
    assert guard.decide("pb", NOW) == [] and guard.alarm == {}, "paused: versions are not served, so not judged"
    resume = operator_decision(guard.ledger, "operator-promote", version(1), playbook_id="pb", by="op", why="",
                               rule=PromotionRule(), now=NOW, running=1, newest=3)
    guard.apply_decision(resume)
    fed(guard, {3: [False]})
    assert guard.decide("pb", NOW) == [], "v3 existed when the operator served v1: it is not served, nor judged"
    guard.apply_version(version(4, parent=1))
    fed(guard, {4: outcomes(rng, 0.1, 40)})
    verdict = guard.decide("pb", NOW)[0].value
    assert (verdict.candidate_version, verdict.served_version) == (4, 1), "resumed: v4, built on v1, is judged"
    assert verdict.newest_version == 4 and verdict.previous_version == 4


def test_traces_naming_an_unseen_version_wait_and_one_that_never_exists_is_dropped():
    guard = Guard(RULE)
    guard.observe("pb", 1, 1.0)
    guard.observe("pb", 0, 1.0)
    guard.advance("pb")
    assert guard.waiting("pb") and guard.samples == {}, "later traces wait behind the unseen version"
    guard.apply_version(version(1))
    guard.advance("pb")
    assert not guard.waiting("pb") and guard.samples["pb"][1].n == 1 and guard.samples["pb"][0].n == 1
    guard.observe("pb", 9, 0.0)
    guard.observe("pb", 1, 0.0)
    assert guard.drop_unknown("pb") == [Count("guard_unknown_version", 1)]
    assert guard.samples["pb"][1].n == 2 and not guard.waiting("pb")


@st.composite
def lineages(draw):
    """Versions 1..n, each built on an earlier one, and a decision serving one of them after which more were built."""
    n = draw(st.integers(1, 12))
    parents = {v: draw(st.integers(0, v - 1)) for v in range(1, n + 1)}
    served = draw(st.integers(0, n))
    named = draw(st.integers(served, n))
    paused = draw(st.booleans())
    decision = PromotionDecision(playbook_id="pb", decision_id=0, action="rollback" if paused else "operator-promote",
                                 served_version=served, served=version(served) if served else None,
                                 previous_version=named, rule="r", reason="x", paused=paused, by="op",
                                 decided_at=NOW)
    return parents, decision


@settings(max_examples=300, deadline=None)
@given(lineages())
def test_a_clean_version_descends_from_the_served_one_through_versions_built_after_every_decision(case):
    parents, decision = case
    ledger = ledger_of(decision)
    named = ledger.named["pb"]
    for v in range(0, max(parents, default=0) + 1):
        if clean(v, ledger, "pb", parents) and v != decision.served_version:
            assert v > named and clean(parents[v], ledger, "pb", parents)
        if v <= named and v != decision.served_version:
            assert not clean(v, ledger, "pb", parents)
    newest = max(parents, default=0)
    runs = served_without_promotion(ledger, "pb", parents, newest)
    assert runs in (newest, decision.served_version)
    assert runs == decision.served_version or (not decision.paused and clean(newest, ledger, "pb", parents))


@st.composite
def live_traces(draw):
    """Traces on versions 0-3 in random order, each version with its own success rate."""
    rates = [draw(st.sampled_from([0.1, 0.5, 0.9])) for _ in range(4)]
    rng = random.Random(draw(st.integers(0, 2**32)))
    count = draw(st.integers(0, 300))
    return [(v, rng.random() < rates[v]) for v in (rng.randrange(4) for _ in range(count))]


@settings(max_examples=150, deadline=None)
@given(live_traces(), st.integers(2, 40))
def test_a_rollback_serves_the_judged_versions_parent_after_a_significant_drop_and_then_nothing_is_judged(
        traces, min_traces):
    rule = GuardRule(alpha=0.05, tau=0.2, min_traces=min_traces)
    guard = Guard(rule)
    for v in (1, 2, 3):
        guard.apply_version(version(v))
    for v, ok in traces:
        guard.observe("pb", v, float(ok))
        guard.advance("pb")
        effects = guard.decide("pb", NOW)
        if not effects:
            continue
        decision = effects[0].value
        test = decision.live_test
        assert decision.served_version == test.parent_version == decision.candidate_version - 1
        assert test.mean < test.parent_mean and min(test.traces, test.parent_traces) >= min_traces
        assert test.log_lr >= test.threshold and decision.paused and decision.by == GUARD
        assert guard.apply_decision(decision)
        for later, value in traces:  # paused: whatever comes next, nothing more is judged
            guard.observe("pb", later, float(value))
        guard.advance("pb")
        assert guard.decide("pb", NOW) == []
        return
