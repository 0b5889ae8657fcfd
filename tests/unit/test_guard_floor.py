"""The guard's floor (``Guard.floor``): a guard restarted on the traces at or above the floor it checkpointed (per
partition from the first trace of a version at or above it, ``traces_resume``, as ``LiveTraces`` does) decides as one
that reads every trace; one a version higher does not.

The model of a run: one playbook, one partition. A live guard takes versions, traces and operator decisions in log
order, deciding after each one (its rollbacks go on ``promoted``); it checkpoints at some step and stops at a later
one. Two guards then start on the logs as the stage does (``playbook``, then ``promoted``, then ``traces``: one from
offset 0, one from the checkpoint) and take the rest of the run; their decisions must be the same."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest

from combee_core.guard.processor import KEEP_VERSIONS, Guard
from combee_core.guard.rule import GuardRule, clean
from combee_core.models import PlaybookVersion, PromotionDecision, VersionStats
from combee_core.promote.promoter_resume import traces_resume
from combee_core.promote.promotion import PromotionRule, operator_decision

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
PB = "pb"


def version(n: int, parent: int) -> PlaybookVersion:
    return PlaybookVersion(playbook_id=PB, version=n, parent_version=parent, batch_id=n - 1, entries=[],
                           next_entry_number=1, operations=[], lineage=[], stats=VersionStats(batch_size=1, k=1, p=1),
                           content_hash=f"{n:064x}", published_at=NOW)


@dataclass
class Run:
    """Events in log order: ("version", PlaybookVersion), ("trace", (version, value)) or ("operator", action, v)."""

    events: list[tuple] = field(default_factory=list)


def operator(guard: Guard, action: str, served: int) -> PromotionDecision:
    target = guard.versions.get(PB, {}).get(served)
    return operator_decision(guard.ledger, action, target, playbook_id=PB, by="op", why="", rule=PromotionRule(),
                             now=NOW, newest=guard.newest(PB))


def tick(guard: Guard) -> list[PromotionDecision]:
    """What the stage's tick does for the playbook: take the traces, decide, and read back its own decision."""
    guard.advance(PB)
    out = []
    for effect in guard.decide(PB, NOW):
        if isinstance(getattr(effect, "value", None), PromotionDecision):
            assert guard.apply_decision(effect.value)
            out.append(effect.value)
    return out


def take(guard: Guard, event: tuple, decisions: list[PromotionDecision]) -> None:
    """One event of the run, then a tick; decisions (operators' and the guard's) go to ``decisions``."""
    if event[0] == "version":
        guard.apply_version(event[1])
    elif event[0] == "trace":
        guard.observe(PB, *event[1])
    else:
        decision = operator(guard, event[1], event[2])
        assert guard.apply_decision(decision)
        decisions.append(decision)
    decisions.extend(tick(guard))


def live(run: Run, checkpoint: int, stop: int, rule: GuardRule, raise_floor: int = 0):
    """The live guard up to ``stop``; returns (decisions on ``promoted``, where its checkpoint at step
    ``checkpoint`` resumes ``traces``, offset of every trace, the floor then)."""
    guard, decisions, traces, resume, floor = Guard(rule), [], [], 0, 0
    for step, event in enumerate([*run.events[:stop], None]):
        if step == checkpoint:
            floor = guard.floor(PB)
            read = [(offset, PB, v) for offset, (v, _) in enumerate(traces)]
            resume = traces_resume(read, {PB: floor + raise_floor}.__getitem__, len(traces))
        if event is None:
            break
        if event[0] == "trace":
            traces.append(event[1])
        take(guard, event, decisions)
    return decisions, resume, floor


def restarted(run: Run, stop: int, logged: list[PromotionDecision], start: int, rule: GuardRule):
    """A guard started at ``stop`` on the logs (traces from offset ``start``) that then takes the rest of the run:
    its decisions (the operators' included, built on its own ledger)."""
    guard = Guard(rule)
    before = run.events[:stop]
    for event in before:
        if event[0] == "version":
            guard.apply_version(event[1])
    for decision in logged:
        guard.apply_decision(decision)
    for value in [e[1] for e in before if e[0] == "trace"][start:]:
        guard.observe(PB, *value)
    decisions = tick(guard)
    for event in run.events[stop:]:
        take(guard, event, decisions)
    return decisions


def random_run(rng: random.Random, versions: int, rule: GuardRule) -> Run:
    """Versions 1..``versions``, each built as the reducer builds it (on the newest if clean, else on the served
    one; now and then on an older one), traces of mostly the newest versions (some of an old one, some of the next
    one before it exists), each version with its own success rate; an operator resumes a paused playbook (serving a
    recent version) or rolls one back now and then. A guard takes the run as it is made, for the reducer's view."""
    run, guard, newest = Run(), Guard(rule), 0
    rates = {v: rng.choice((0.15, 0.5, 0.85)) for v in range(versions + 2)}

    def add(event: tuple) -> None:
        run.events.append(event)
        take(guard, event, [])

    while newest < versions:
        for _ in range(rng.randint(0, 24)):
            if rng.random() < 0.1:
                v = rng.randint(0, newest)
            elif rng.random() < 0.05:
                v = newest + 1
            else:
                v = max(0, newest - rng.choice((0, 0, 0, 1, 2)))
            add(("trace", (v, float(rng.random() < rates[v]))))
        parents = guard.parents.get(PB, {})
        parent = newest if clean(newest, guard.ledger, PB, parents) else guard.ledger.served_version(PB)
        if rng.random() < 0.1:
            parent = rng.randint(max(0, newest - KEEP_VERSIONS - 8), newest)
        newest += 1
        add(("version", version(newest, parent)))
        if guard.ledger.paused(PB) and rng.random() < 0.3:
            add(("operator", "operator-promote", rng.choice([guard.ledger.served_version(PB), newest])))
        elif rng.random() < 0.03:
            add(("operator", "rollback", rng.randint(max(0, newest - KEEP_VERSIONS - 4), newest - 1)))
    return run


def cases(seed: int, count: int = 40):
    """Random runs, each with a checkpoint and a later stop: (run, rule, checkpoint, stop)."""
    rng = random.Random(seed)
    for _ in range(count):
        rule = GuardRule(alpha=rng.choice((0.05, 0.2)), tau=0.3, min_traces=rng.choice((3, 5, 10)))
        run = random_run(rng, rng.choice((5, 40, KEEP_VERSIONS + 10, 2 * KEEP_VERSIONS)), rule)
        checkpoint = rng.randrange(len(run.events))
        yield run, rule, checkpoint, rng.randint(checkpoint, len(run.events))


@pytest.mark.parametrize("seed", range(4))
def test_a_guard_restarted_at_its_floor_decides_as_one_that_read_every_trace(seed):
    both = 0
    for case, (run, rule, checkpoint, stop) in enumerate(cases(seed)):
        logged, resume, floor = live(run, checkpoint, stop, rule)
        full = restarted(run, stop, logged, 0, rule)
        ours = restarted(run, stop, logged, resume, rule)
        assert [d.model_dump() for d in ours] == [d.model_dump() for d in full], (seed, case, floor, resume)
        both += resume > 0 and any(d.by == "guard" for d in full)
    assert both, "some case must resume past the first trace and then roll back, or it shows nothing"


def test_in_random_runs_a_floor_one_version_higher_changes_a_decision():
    changed = 0
    for run, rule, checkpoint, stop in cases(seed=2):
        logged, _, _ = live(run, checkpoint, stop, rule)
        _, higher, _ = live(run, checkpoint, stop, rule, raise_floor=1)
        changed += restarted(run, stop, logged, higher, rule) != restarted(run, stop, logged, 0, rule)
    assert changed


def chain(versions: int, before: list[tuple[int, float]], after: list[tuple[int, float]]) -> Run:
    """Versions 1..``versions``, each on the one before; ``before`` traces, then the versions, then ``after``."""
    events = [("trace", t) for t in before] + [("version", version(n, n - 1)) for n in range(1, versions + 1)]
    return Run(events + [("trace", t) for t in after])


@pytest.mark.parametrize("versions", [1, KEEP_VERSIONS + 6])
def test_a_floor_one_version_higher_changes_the_decision(versions):
    """The oldest kept version (v0 with one version; v7 with 70) has good traces before the checkpoint; after the
    restart its child does badly. Read from the floor, the guard rolls the child back with the parent's traces;
    from one version higher it never sees them and cannot judge."""
    rule = GuardRule(alpha=0.05, tau=0.3, min_traces=5)
    oldest = max(0, versions - KEEP_VERSIONS + 1)
    run = chain(versions, [(oldest, 1.0)] * 20 + [(versions, 1.0)] * 3, [(oldest + 1, 0.0)] * 20)
    stop = len(run.events) - 20
    logged, resume, floor = live(run, stop, stop, rule)
    assert floor == oldest and resume == 0 and logged == []
    full = restarted(run, stop, logged, 0, rule)
    assert [(d.candidate_version, d.served_version, d.live_test.parent_traces) for d in full] == [
        (oldest + 1, oldest, 20)]
    assert restarted(run, stop, logged, resume, rule) == full
    _, higher, _ = live(run, stop, stop, rule, raise_floor=1)
    assert higher == 20 and restarted(run, stop, logged, higher, rule) == []


def test_the_floor_is_the_oldest_kept_version_and_only_rises():
    guard = Guard(GuardRule())
    assert guard.floor(PB) == 0, "nothing seen: every trace may count"
    floors = []
    for n in range(1, 2 * KEEP_VERSIONS):
        guard.apply_version(version(n, n - 1))
        floors.append(guard.floor(PB))
    assert floors == sorted(floors) and floors[KEEP_VERSIONS - 2] == 0 and floors[KEEP_VERSIONS - 1] == 1
    assert floors[-1] == 2 * KEEP_VERSIONS - 1 - KEEP_VERSIONS + 1
    assert not guard.watched(PB, 1), "v1 is judged against v0 only while v0 is kept, like any other parent"


def test_a_served_version_stays_kept_and_holds_the_floor():
    """An operator serves v3: it stays kept while newer versions come, since the next one built on it is judged
    against it; version 0, served by a decision, stays kept the same way."""
    for served in (3, 0):
        guard = Guard(GuardRule())
        for n in range(1, 5):
            guard.apply_version(version(n, n - 1))
        assert guard.apply_decision(operator(guard, "operator-promote", served))
        for n in range(5, 3 * KEEP_VERSIONS):
            guard.apply_version(version(n, served if n == 3 * KEEP_VERSIONS - 1 else n - 1))
        assert guard.floor(PB) == served and guard.kept(PB, served)
        assert guard.watched(PB, 3 * KEEP_VERSIONS - 1), "built on the served version after the decision"


def test_a_version_served_after_it_was_dropped_holds_the_floor():
    """An operator serves v3 once v100 exists: this guard dropped it, but one that starts may read the decision
    before v67 and keep it, so the floor falls to it (its traces from then on are read again)."""
    guard = Guard(GuardRule())
    for n in range(1, 101):
        guard.apply_version(version(n, n - 1))
    assert guard.floor(PB) == 100 - KEEP_VERSIONS + 1 and not guard.kept(PB, 3)
    guard.versions[PB][3] = version(3, 2)  # the operator's command reads v3 from the log
    decision = operator(guard, "operator-promote", 3)
    del guard.versions[PB][3]
    assert guard.apply_decision(decision) and guard.floor(PB) == 3
