"""A promoter restarted from its resume offsets makes the same next decision as one that read the whole logs
(``combee_core.promote.promoter_resume``), and each offset is the latest that does: one record later changes it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

import pytest

from combee_core.models import (
    BatchManifest,
    EvalRequest,
    EvalResult,
    HeldOutTask,
    PlaybookEntry,
    PlaybookVersion,
    PromotionDecision,
    ProposerModels,
    TaskSetVersion,
    Usage,
    VersionStats,
    tasks_digest,
)
from combee_core.processors.effects import Publish
from combee_core.promote.processor import Promoter
from combee_core.promote.promoter_resume import ResumeTracker, canary_floor, floors, traces_resume
from combee_core.promote.promotion import PromotionRule, canary_verdict, next_base
from combee_core.promote.task_sets import PinnedTask, pinned_tasks
from combee_core.sim.task_suite import build_suite
from combee_core.topology import Topic

NOW = datetime(2026, 1, 1, tzinfo=UTC)

def task_set(name: str, tasks: list[HeldOutTask], version: int = 1) -> TaskSetVersion:
    return TaskSetVersion(name=name, version=version, tasks=tasks, digest=tasks_digest(tasks), registered_at=NOW)


@dataclass(frozen=True)
class HeldOut:
    """A held-out task set and its tasks as the promoter scores them."""

    version: TaskSetVersion

    @property
    def tasks(self) -> tuple[PinnedTask, ...]:
        return pinned_tasks(self.version)


HELD_OUT = HeldOut(task_set("held-out", [HeldOutTask(task_id=t.task_id, input=t.prompt)
                                         for t in build_suite(families=4, seed=3).held_out[:3]]))
PINS = {"*": "held-out"}


def promoter_on(rule: PromotionRule, *, keep_everything: bool = False) -> Promoter:
    """A promoter whose every playbook is pinned to ``HELD_OUT``."""
    return Promoter(rule, PINS, ProposerModels(reflector="r", aggregator="a", reducer="d"),
                    task_sets=[HELD_OUT.version], keep_everything=keep_everything)
SCORES = {"pb": [0.2, 0.3, 0.4, 0.1, 0.5, 0.3, 0.2, 0.1, 0.9], "pa": [0.2, 0.6, 0.1, 0.1, 0.1, 0.7]}
"""Held-out score of each version's content (index = version): pb promotes 1, 2, 4, rejects 3, 5, 6, 7 and its
candidate 8 is pending (a promotion whose cost counts 5-8); pa promotes 1, rejects 2-4, 5 is pending."""
ORDER = (Topic.PLAYBOOK, Topic.EVAL_RESULTS, Topic.PROMOTED, Topic.BATCHES)


def _promoter() -> Promoter:
    return promoter_on(PromotionRule(epsilon=0.01))


async def _nothing() -> None:
    return None


def _apply(promoter: Promoter, tracker: ResumeTracker | None, topic: Topic, offset: int, value) -> None:
    if topic == Topic.EVAL_RESULTS:
        promoter.apply_result(value)
        if tracker is not None:
            tracker.took_result(value, offset)
        return
    apply = {Topic.PLAYBOOK: promoter.apply_version, Topic.PROMOTED: promoter.apply_decision,
             Topic.BATCHES: promoter.apply_manifest}[topic]
    number = {Topic.PLAYBOOK: lambda v: v.version, Topic.PROMOTED: lambda d: d.decision_id,
              Topic.BATCHES: lambda m: m.batch_id}[topic](value)
    if apply(value) and tracker is not None:
        tracker.took(topic, value.playbook_id, offset, number)


def _version(playbook_id: str, version: int, parent_version: int) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{version}", section="tools", content=f"{playbook_id} lesson {version}",
                             created_version=version, updated_version=version)]
    return PlaybookVersion(
        playbook_id=playbook_id, version=version, parent_version=parent_version, batch_id=version - 1,
        entries=entries, next_entry_number=2, operations=[], lineage=[f"t{version}"],
        stats=VersionStats(batch_size=1, k=1, p=1, llm_calls=2 * version), content_hash=f"{version:064x}",
        published_at=NOW)


class Run:
    """The promoter's four logs, written as a run would write them, and a promoter reading them as they grow."""

    def __init__(self) -> None:
        self.logs: dict[Topic, list] = {topic: [] for topic in ORDER}
        self.whole = _promoter()
        self.tracker = ResumeTracker(self.whole)

    def write(self, topic: Topic, value) -> None:
        self.logs[topic].append(value)
        _apply(self.whole, self.tracker, topic, len(self.logs[topic]) - 1, value)

    def candidate(self, playbook_id: str, version: int) -> None:
        self.write(Topic.BATCHES, BatchManifest(
            playbook_id=playbook_id, batch_id=version - 1, base_version=version - 1, trace_ids=[f"t{version}"],
            reflection_ids=[f"r{version}"], n=1, k=1, p=1, seed=0, subgroup_sizes=[1], target_batch_size=1,
            closed_by="size", closed_at=NOW, reflection_usage=Usage(calls=version, cost_usd=0.01 * version)))
        base = next_base(self.whole.ledger, playbook_id, version - 1)
        assert base is not None
        self.write(Topic.PLAYBOOK, _version(playbook_id, version, base.parent_version))

    async def evaluate(self, playbook_id: str) -> list[PromotionDecision]:
        """Answer the requests (each first result followed by a contradicting second one) and return the decision."""
        for publish in await self.whole.advance(playbook_id, None, NOW, _nothing):
            request = publish.value if isinstance(publish, Publish) else None
            if isinstance(request, EvalRequest):
                for score in (SCORES[playbook_id][request.version], 1.0 - SCORES[playbook_id][request.version]):
                    self.write(Topic.EVAL_RESULTS, EvalResult(
                        request_id=request.request_id, playbook_id=playbook_id, digest=request.digest,
                        task_id=request.task_id, score=score, evaluator="test", evaluator_model="sim",
                        evaluated_at=NOW))
        return [p.value for p in await self.whole.advance(playbook_id, None, NOW, _nothing)
                if isinstance(p, Publish) and isinstance(p.value, PromotionDecision)]

    async def decide(self, playbook_id: str, version: int) -> None:
        self.candidate(playbook_id, version)
        [decision] = await self.evaluate(playbook_id)
        self.write(Topic.PROMOTED, decision)


async def _run() -> Run:
    run = Run()
    for version in range(1, 8):
        await run.decide("pb", version)
        if version < 5:
            await run.decide("pa", version)
    for playbook_id, version in (("pb", 8), ("pa", 5)):  # evaluated, not decided yet
        run.candidate(playbook_id, version)
        assert len(await run.evaluate(playbook_id)) == 1
    return run


def _resumed(run: Run, starts: dict[Topic, int], gates: dict[Topic, dict[str, int]]) -> Promoter:
    promoter = _promoter()
    promoter.versions_gate.load(gates[Topic.PLAYBOOK])
    promoter.ledger.gate.load(gates[Topic.PROMOTED])
    promoter.batches_gate.load(gates[Topic.BATCHES])
    for topic in ORDER:
        for offset, value in enumerate(run.logs[topic]):
            if offset >= starts[topic]:
                _apply(promoter, None, topic, offset, value)
    return promoter


def _resume_points(run: Run) -> tuple[dict[Topic, int], dict[Topic, dict[str, int]]]:
    gate = {Topic.PLAYBOOK: run.whole.versions_gate, Topic.PROMOTED: run.whole.ledger.gate,
            Topic.BATCHES: run.whole.batches_gate}
    starts, gates = {}, {}
    for topic, points in run.tracker.points.items():
        starts[topic], gates[topic] = points.resume(len(run.logs[topic]), gate[topic].state())
    starts[Topic.EVAL_RESULTS] = run.tracker.results_resume(len(run.logs[Topic.EVAL_RESULTS]))
    gates[Topic.EVAL_RESULTS] = {}
    return starts, gates


async def _next(promoter: Promoter) -> list:
    return [effect for pb in ("pb", "pa") for effect in await promoter.advance(pb, None, NOW, _nothing)]


async def test_a_promoter_resumed_from_its_offsets_decides_as_one_that_read_everything() -> None:
    run = await _run()
    assert floors(run.whole, "pb").version == 5  # served v4: versions 5-8 are costed, 8 is the candidate
    starts, gates = _resume_points(run)
    assert all(0 < starts[topic] < len(run.logs[topic]) for topic in ORDER), starts  # each log is skipped in part
    whole = await _next(run.whole)
    decisions = [e.value for e in whole if isinstance(e, Publish) and isinstance(e.value, PromotionDecision)]
    assert [(d.playbook_id, d.candidate_version, d.action) for d in decisions] == [("pb", 8, "promote"),
                                                                                  ("pa", 5, "promote")]
    assert decisions[0].cost is not None and decisions[0].cost.candidates == 4  # v5-v8, the rejected ones included
    assert await _next(_resumed(run, starts, gates)) == whole


@pytest.mark.parametrize("topic", ORDER)
async def test_starting_one_record_later_changes_the_next_decision(topic: Topic) -> None:
    """Each offset is where a record the next decisions rest on starts: the served content's first results (a
    contradicting duplicate follows), the costed version or manifest, the decision the ledger continues from."""
    run = await _run()
    starts, gates = _resume_points(run)
    assert await _next(_resumed(run, {**starts, topic: starts[topic] + 1}, gates)) != await _next(run.whole)


async def test_the_resume_points_rise_as_decisions_are_made() -> None:
    run = Run()
    seen = []
    for version in range(1, 8):
        await run.decide("pb", version)
        seen.append(_resume_points(run)[0])
    for topic in ORDER:
        assert [s[topic] for s in seen] == sorted(s[topic] for s in seen), topic


def _served(decision_id: int, version: int, action: str, canary: PlaybookVersion | None = None) -> PromotionDecision:
    candidate = _version("pb", version, version - 1)
    keep = version - 1 if canary is not None else version
    return PromotionDecision(
        playbook_id="pb", decision_id=decision_id, action=action, candidate_version=version,
        candidate_hash=candidate.content_hash, served_version=keep,
        served=None if keep == 0 else _version("pb", keep, keep - 1),
        previous_version=version - 1, rule="r", by="promoter", decided_at=NOW, reason="test", canary=canary,
        canary_share=0.5 if canary is not None else None, held_out_score=0.5, incumbent_score=0.4)


def test_a_canary_verdict_counts_the_traces_from_the_resume_offset_on() -> None:
    rule = PromotionRule(canary_share=0.5, canary_min_traces=3)
    promoter = promoter_on(rule)
    promoter.apply_decision(_served(0, 1, "promote"))
    promoter.apply_decision(_served(1, 2, "canary", canary=_version("pb", 2, 1)))
    # one partition: pb's traces of v0 and v1 before its canary, pa's (no decision yet) of v0, then the canary's
    partition = [(0, "pb", 0, 0.1), (1, "pa", 0, 0.9), (2, "pb", 1, 0.2), (3, "pb", 1, 0.3), (4, "pa", 0, 0.5),
                 (5, "pb", 2, 0.9), (6, "pb", 1, 0.4), (7, "pb", 2, 0.8), (8, "pb", 1, 0.5), (9, "pb", 2, 0.7),
                 (10, "pb", 1, 0.6), (11, "pb", 2, 0.2)]

    def verdict(start: int):
        live = [(version, score) for offset, pb, version, score in partition if pb == "pb" and offset >= start]
        return canary_verdict(rule, promoter.ledger, "pb", live, costs=[], now=NOW)

    start = traces_resume([(o, pb, v) for o, pb, v, _ in partition], partial(canary_floor, promoter), len(partition))
    assert start == 5  # pb's first trace of v2; pa's traces are of decided versions (v0)
    assert verdict(start) == verdict(0) is not None and verdict(0).action == "promote"
    assert verdict(start + 1) != verdict(0)  # without the canary's first trace: too few incumbent traces after it
    assert canary_floor(promoter, "pa") == 1  # no canary: from its next candidate on
