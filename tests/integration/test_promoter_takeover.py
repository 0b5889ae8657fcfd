"""A promoter whose playbook is taken over while it is deciding does not write that decision: the new owner writes
it, once (``streams.topology.write_fence``). The window is widened on purpose: the first promoter's next decision is
held after it is computed, and three more promoters join meanwhile (the group moves the playbook to one of them three
times in four: the range assignor gives the partition to the lowest member id). The hold ends as soon as another
promoter has written that decision (the race this test is for), or after ``HOLD_S`` when none took the playbook."""

from __future__ import annotations

import asyncio
import contextlib

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
"""The longest the held decision waits before its write when no other promoter writes it: covers three promoters
starting, joining (Tansu holds a join for 3 s) and the new owner catching up and deciding, on a loaded machine."""


class HeldDecision:
    """Holds the next decision a promoter computes until another promoter has written a decision of the same id (at
    most ``HOLD_S``), and tells when the held promoter's write attempt is over."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.decided = asyncio.Event()
        self.attempted = asyncio.Event()
        self.written_by_another = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._held: tuple[str, int] | None = None  # (playbook id, decision id) of the held decision
        advance, write = Promoter.advance, PromoterStage._write_decision

        async def held_advance(promoter: Promoter, *args, **kwargs):
            effects = await advance(promoter, *args, **kwargs)
            numbered = [e.number for e in effects if isinstance(e, Publish) and e.number is not None]
            if self.armed and numbered:
                self.armed, self._task, self._held = False, asyncio.current_task(), numbered[0]
                self.decided.set()
                with contextlib.suppress(TimeoutError):  # the fault injected: a slow decision
                    await asyncio.wait_for(self.written_by_another.wait(), HOLD_S)
            return effects

        async def watched_write(stage: PromoterStage, publish: Publish) -> bool:
            written = False
            try:
                written = await write(stage, publish)
                return written
            finally:
                if asyncio.current_task() is self._task:
                    self.attempted.set()
                elif written and publish.number == self._held:
                    self.written_by_another.set()

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
            await asyncio.gather(*(other.__aenter__() for other in others))  # they join while the decision is held
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
