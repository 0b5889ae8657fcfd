"""A promoter restarted at any point of a run, from the checkpoints its views wrote so far, makes the same next
decision as one that read the whole logs (``combee_core.promote.promoter_resume``, ``promoter_views``).

``test_promoter_resume`` checks the resume offsets computed once, at the end of a run. The stage writes each view's
checkpoint while that view reads (every ``view_checkpoint_every`` of its records, ``LogView._follow``), with the
state the promoter had then: a ``playbook`` checkpoint is written when a candidate arrives, before it is decided, and
a quiet view keeps an older one. Here the checkpoints are those objects (``GatedState`` with the tracker's points and
the promoter's gates, ``FirstResults``), written on that cadence, and the promoter is restarted after every record of
the run. An operator's promotion of a rejected candidate is one of the documented cases that reach below a checkpoint
(its results are requested again, the decisions stay the same), and after a rollback to v0 the decision on the newest
decided candidate is the one a restart needs to know what is decided."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from combee_core.models import EvalRequest, EvalResult, PromotionDecision, ViewCheckpoint, entries_digest
from combee_core.processors.effects import Publish
from combee_core.promote.processor import Promoter
from combee_core.promote.promoter_resume import Floors, floors
from combee_core.promote.promotion import PromotionRule, operator_decision
from combee_core.topology import Topic
from streams.topology.promoter_views import FirstResults
from streams.topology.views.log_view import CheckpointedState, GatedState
from tests.unit.test_promoter_resume import (
    HELD_OUT,
    NOW,
    ORDER,
    SCORES,
    Run,
    _apply,
    _next,
    _nothing,
    _promoter,
    _resume_points,
    _resumed,
)


@dataclass(frozen=True)
class Restart:
    """The logs' lengths after one record of the run, and each view's latest checkpoint then."""

    lengths: dict[Topic, int]
    checkpoints: dict[Topic, ViewCheckpoint]


class CheckpointedRun(Run):
    """A :class:`Run` whose promoter's views write checkpoints as the stage's do, every ``every`` records each."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        gates = {Topic.PLAYBOOK: self.whole.versions_gate, Topic.PROMOTED: self.whole.ledger.gate,
                 Topic.BATCHES: self.whole.batches_gate}
        self.states: dict[Topic, CheckpointedState] = {
            topic: GatedState(gate, points=self.tracker.points[topic]) for topic, gate in gates.items()}
        self.states[Topic.EVAL_RESULTS] = FirstResults(self.tracker)
        self.checkpointed = dict.fromkeys(ORDER, 0)
        self.checkpoints: dict[Topic, ViewCheckpoint] = {}
        self.restarts: list[Restart] = []

    def write(self, topic: Topic, value) -> None:
        super().write(topic, value)
        position = len(self.logs[topic])
        if position - self.checkpointed[topic] >= self.every:
            resume, nexts, latest = self.states[topic].checkpoint(position)
            self.checkpoints[topic] = ViewCheckpoint(view=f"promote/{topic}", position=resume, nexts=nexts,
                                                     latest=latest, written_at=NOW)
            self.checkpointed[topic] = position
        self.restarts.append(Restart({t: len(self.logs[t]) for t in ORDER}, dict(self.checkpoints)))


def _read(run: Run, restart: Restart, *, from_checkpoints: bool) -> Promoter:
    """A new promoter that reads the logs as they were at ``restart``: from each view's checkpoint, or from 0."""
    promoter = _promoter()
    gates = {Topic.PLAYBOOK: promoter.versions_gate, Topic.PROMOTED: promoter.ledger.gate,
             Topic.BATCHES: promoter.batches_gate}
    for topic in ORDER:
        checkpoint = restart.checkpoints.get(topic) if from_checkpoints else None
        if checkpoint is not None and topic in gates:
            gates[topic].load(checkpoint.nexts)
        start = checkpoint.position if checkpoint is not None else 0
        for offset in range(start, restart.lengths[topic]):
            _apply(promoter, None, topic, offset, run.logs[topic][offset])
    return promoter


async def _differences(run: CheckpointedRun) -> list[str]:
    """The restart points at which the restarted promoter's next effects differ from a whole reader's."""
    found = []
    for at, restart in enumerate(run.restarts):
        resumed = await _next(_read(run, restart, from_checkpoints=True))
        whole = await _next(_read(run, restart, from_checkpoints=False))
        if resumed != whole:
            found.append(f"after record {at} {restart.lengths}: {resumed} != {whole}")
    return found


async def _settle(promoter: Promoter, playbook_id: str) -> tuple[list[PromotionDecision], set[tuple[str, str]]]:
    """The promoter's next decisions on the playbook once the results it requests are in (each content scored as in
    ``SCORES``), and the (content, task) pairs it requested."""
    requested: set[tuple[str, str]] = set()
    while True:
        effects = [e.value for e in await promoter.advance(playbook_id, None, NOW, _nothing) if isinstance(e, Publish)]
        requests = [r for r in effects if isinstance(r, EvalRequest) and (r.digest, r.task_id) not in requested]
        if not requests:
            return [d for d in effects if isinstance(d, PromotionDecision)], requested
        for request in requests:
            requested.add((request.digest, request.task_id))
            promoter.apply_result(EvalResult(
                request_id=request.request_id, playbook_id=playbook_id, digest=request.digest, task_id=request.task_id,
                score=SCORES[playbook_id][request.version], evaluator="test", evaluator_model="sim", evaluated_at=NOW))


def _content(run: Run, playbook_id: str, version: int) -> str:
    [found] = [v for v in run.logs[Topic.PLAYBOOK] if (v.playbook_id, v.version) == (playbook_id, version)]
    return entries_digest(list(found.entries))


def _operator_promotes(run: Run, playbook_id: str, version: int | None, action: str = "operator-promote") -> None:
    served = None if version is None else next(v for v in run.logs[Topic.PLAYBOOK]
                                               if (v.playbook_id, v.version) == (playbook_id, version))
    run.write(Topic.PROMOTED, operator_decision(run.whole.ledger, action, served, playbook_id=playbook_id,
                                                by="ann@host", why="", rule=PromotionRule(), now=NOW))


@pytest.mark.parametrize("every", [1, 2, 3])
async def test_a_promoter_restarted_after_any_record_decides_as_one_that_read_everything(every: int) -> None:
    """pb promotes 1, 2, 4 and rejects 3, 5, 6, 7 (its candidate 8 is costed with 5-8), pa promotes 1 and rejects
    2-4 (``SCORES``): at every restart point the next effects (requests, cache hits, decisions) are the same."""
    run = CheckpointedRun(every)
    for version in range(1, 8):
        await run.decide("pb", version)
        if version < 5:
            await run.decide("pa", version)
    for playbook_id, version in (("pb", 8), ("pa", 5)):
        run.candidate(playbook_id, version)
        await run.evaluate(playbook_id)
    assert len(run.restarts) > 100 and set(run.checkpoints) == set(ORDER)
    assert run.checkpoints[Topic.PLAYBOOK].position > 0  # the checkpoints skip the start of the logs
    assert await _differences(run) == []


@pytest.mark.parametrize("every", [1, 2])
async def test_a_rejected_candidate_an_operator_promotes_is_evaluated_again_after_a_restart(every: int) -> None:
    """pa: v1 promoted, v2 and v3 rejected, an operator promotes the rejected v2, v4 (built on v1) is decided
    against it and v5 is pending; pb's v1-v4 interleaved. v2's results were droppable at the checkpoints written
    before the operator's promotion (a decided candidate's): a promoter restarted from them requests v2's results
    again (promoter_resume's docstring), and decides as one that read everything."""
    run = CheckpointedRun(every)
    for version in range(1, 4):
        await run.decide("pa", version)
        await run.decide("pb", version)
    _operator_promotes(run, "pa", 2)
    await run.decide("pa", 4)
    await run.decide("pb", 4)
    run.candidate("pa", 5)
    await run.evaluate("pa")
    decisions = [(d.action, d.candidate_version, d.served_version, d.cost.candidates if d.cost else None)
                 for d in run.logs[Topic.PROMOTED] if d.playbook_id == "pa"]
    assert decisions == [("promote", 1, 1, 1), ("reject", 2, 1, None), ("reject", 3, 1, None),
                         ("operator-promote", 2, 2, None), ("promote", 4, 4, 2)]  # v4 costed with v3
    again = {(_content(run, "pa", 2), task.task_id) for task in HELD_OUT.tasks}
    evaluated_again = 0
    for restart in run.restarts:
        for playbook_id in ("pa", "pb"):
            resumed, requested = await _settle(_read(run, restart, from_checkpoints=True), playbook_id)
            whole, whole_requested = await _settle(_read(run, restart, from_checkpoints=False), playbook_id)
            assert resumed == whole and requested - whole_requested <= again, (restart.lengths, playbook_id)
            evaluated_again += requested != whole_requested
    assert evaluated_again > 0


async def test_after_a_rollback_a_restarted_promoter_decides_the_next_candidate_not_a_decided_one() -> None:
    """``combee rollback`` from v1 to v0 (its default target): no decision is on the served v0, so the decision on
    the newest decided candidate (v1) is what tells a restart that v1 is decided; the next candidate v2 is held
    (automatic promotion is paused), by the restarted promoter too."""
    run = Run()
    await run.decide("pa", 1)
    _operator_promotes(run, "pa", None, action="rollback")
    run.candidate("pa", 2)
    await run.evaluate("pa")
    assert floors(run.whole, "pa") == Floors(decision=0, version=1, batch=0)
    starts, gates = _resume_points(run)
    whole = await _next(run.whole)
    assert [(d.action, d.candidate_version) for d in _decisions(whole)] == [("hold", 2)]
    resumed = _resumed(run, starts, gates)
    assert _decisions(await _next(resumed)) == _decisions(whole)
    assert resumed.ledger.last_decided("pa") == 1


def _decisions(effects: list) -> list[PromotionDecision]:
    return [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PromotionDecision)]
