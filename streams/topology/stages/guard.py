"""Guard: with promotion off, rolls a served version back to its parent when its live traces do significantly worse
(``combee_core.guard.processor``), writing the rollback on ``promoted`` (by ``guard``, paused until
``combee promote``); followers and the reducer honour that pointer.

It reads every partition of ``traces`` outside any group (the success or score of each trace and the version it
names) from its checkpoints (``guard/traces/<partition>`` on ``checkpoints``): per partition, its first trace of a
version at or above the playbook's ``Guard.floor``, the oldest version the guard keeps; and ``playbook`` and
``promoted`` as views, from the beginning. It consumes ``promoted`` in its group only to own
the playbooks (one partition: one guard decides at a time); every replica keeps the samples, so a new owner decides
at once on the same log.
"""

from __future__ import annotations

import logging

from aiokafka.structs import ConsumerRecord

from combee_core.guard.processor import Guard
from combee_core.guard.rule import GuardRule
from combee_core.models import PlaybookVersion, PromotionDecision, utc_now
from combee_core.processors.effects import Publish
from combee_core.topology import GUARD, Topic
from streams.topology.effects import perform
from streams.topology.runtime import Stage
from streams.topology.views.live_traces import LiveTraces
from streams.topology.views.log_view import model_view
from streams.topology.views.numbered_log import NumberedLog

log = logging.getLogger(__name__)


class GuardStage(Stage):
    spec = GUARD
    input_model = None  # the group only gives ownership: decisions are read through the promoted view

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.guard = Guard(GuardRule(alpha=settings.guard_alpha, tau=settings.guard_tau,
                                     min_traces=settings.guard_min_traces, metric=settings.guard_metric))
        self.decisions = NumberedLog[PromotionDecision](self, Topic.PROMOTED, accept=self.guard.apply_decision,
                                                        gate=self.guard.ledger.gate)
        self._versions = model_view(self, Topic.PLAYBOOK, PlaybookVersion, self.guard.apply_version)

    async def prepare(self) -> None:
        for view in (self._versions, self.decisions):
            await view.start()
        await LiveTraces(self, self.guard.rule.metric, self._observe, floor=self.guard.floor).start()

    def _observe(self, playbook_id: str, version: int, value: float | None) -> None:
        """One trace's metric; a trace without it does not count."""
        if value is not None:
            self.guard.observe(playbook_id, version, value)

    async def handle(self, record: ConsumerRecord, value: bytes | None) -> None:
        self.done(record)  # decisions are taken from the promoted view; the group only gives ownership

    async def tick(self, now: float) -> None:
        for playbook_id in self.guard.playbooks():
            self.guard.advance(playbook_id)
            if self.guard.waiting(playbook_id):  # a trace names a version not seen yet: is there one?
                await self._versions.catch_up()
                self.guard.advance(playbook_id)
                await perform(self, self.guard.drop_unknown(playbook_id))
            if self.owns_key(playbook_id):
                await perform(self, self.guard.decide(playbook_id, utc_now()), self._write_decision)

    async def _write_decision(self, publish: Publish) -> bool:
        if not await self.decisions.write(publish):
            return False
        decision = publish.value
        assert isinstance(decision, PromotionDecision)
        log.warning("%s: guard rolled back v%s to v%d (%s)", decision.playbook_id, decision.candidate_version,
                    decision.served_version, decision.reason)
        return True
