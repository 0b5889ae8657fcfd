"""A promoter whose playbook is taken over while it is deciding does not write that decision: the new owner writes
it, once (``streams.topology.write_fence``). The window is widened on purpose: the first promoter's next decision is
held for a while after it is computed, and three more promoters join meanwhile (the group moves the playbook to one
of them three times in four: the range assignor gives the partition to the lowest member id)."""

from __future__ import annotations

import asyncio

import pytest

from combee_core.models import PromotionDecision
from combee_core.processors.effects import Publish
from combee_core.promote.processor import Promoter
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.stages.promote import PromoterStage
from streams.topology.topic_reader import read_topic
from tests.integration.test_promoted_versions import PB
from tests.integration.topology_support import SIZE_CLOSES_S, make_traces, run_settings, wait_decisions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOLD_S = 20.0
"""How long the held decision waits before its write: covers three promoters starting, joining (Tansu holds a join
for 3 s) and the new owner catching up and deciding, on a loaded machine."""


class HeldDecision:
    """Holds the next decision a promoter computes for ``HOLD_S`` before it is written, and tells when that
    promoter's write attempt is over."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.decided = asyncio.Event()
        self.attempted = asyncio.Event()
        self._task: asyncio.Task | None = None
        advance, write = Promoter.advance, PromoterStage._write_decision

        async def held_advance(promoter: Promoter, *args, **kwargs):
            effects = await advance(promoter, *args, **kwargs)
            if self.armed and any(isinstance(e, Publish) and e.number is not None for e in effects):
                self.armed, self._task = False, asyncio.current_task()
                self.decided.set()
                await asyncio.sleep(HOLD_S)  # the fault injected: a slow decision
            return effects

        async def watched_write(stage: PromoterStage, publish: Publish) -> bool:
            try:
                return await write(stage, publish)
            finally:
                if asyncio.current_task() is self._task:
                    self.attempted.set()

        monkeypatch.setattr(Promoter, "advance", held_advance)
        monkeypatch.setattr(PromoterStage, "_write_decision", watched_write)


async def test_a_promoter_that_loses_the_playbook_while_deciding_does_not_write_the_decision(
        kafka, unique_prefix, monkeypatch):
    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, batch_size=20,
                            max_wait_s=SIZE_CLOSES_S)
    traces = make_traces(60, PB)
    held = HeldDecision(monkeypatch)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[:20])
        assert len(await wait_decisions(run, 1, timeout_s=120)) == 1
        held.armed = True
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[20:40])
        await asyncio.wait_for(held.decided.wait(), 120)  # decision 1 computed, held before its write
        others = [InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("promote",)) for _ in range(3)]
        try:
            for other in others:
                await other.__aenter__()
            await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[40:60])
            found = await wait_decisions(run, 3, timeout_s=120)
            await asyncio.wait_for(held.attempted.wait(), HOLD_S + 60)
        finally:
            for other in others:
                await other.stop()
        records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic("promoted"))
    assert [(d.decision_id, d.candidate_version) for d in found] == [(0, 1), (1, 2), (2, 3)]
    written = [PromotionDecision.from_json_bytes(r.value).decision_id for r in records]
    assert written == [0, 1, 2], f"a decision id written twice: {written}"
