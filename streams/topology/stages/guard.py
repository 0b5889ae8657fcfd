"""Guard: with promotion off, rolls a served version back to its parent when its live traces do significantly worse
(``combee_core.processors.guard``), writing the rollback on ``promoted`` (by ``guard``, paused until
``combee promote``); followers and the reducer honour that pointer.

It reads every partition of ``traces`` from the beginning outside any group (the success or score of each trace and
the version it names), and ``playbook`` and ``promoted`` as views. It consumes ``promoted`` in its group only to own
the playbooks (one partition: one guard decides at a time); every replica keeps the samples, so a new owner decides
at once on the same log.
"""

from __future__ import annotations

import logging

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.guard import GuardRule
from combee_core.models import PlaybookVersion, utc_now
from combee_core.processors.effects import Publish
from combee_core.processors.guard import Guard
from combee_core.topology import GUARD, Topic
from streams.topology.effects import perform
from streams.topology.log_view import LogView
from streams.topology.runtime import Stage
from streams.topology.stages.promoter import LiveScores, take_decision, write_decision

log = logging.getLogger(__name__)

STAGE = GUARD.name


class LiveValues(LiveScores):
    """Every trace's (playbook, version, success or score), handed to the guard in the order of its partition."""

    def __init__(self, stage: Stage, guard: Guard) -> None:
        super().__init__(stage)
        self._guard = guard

    def take(self, value: bytes | None) -> None:
        """One trace record; what is not a readable trace, or lacks the metric, does not count."""
        metric = self._guard.rule.metric
        try:
            trace = orjson.loads(value or b"")
            playbook_id, version, raw = trace["playbook_id"], trace["playbook_version"], trace.get(metric)
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if not isinstance(playbook_id, str) or not isinstance(version, int) or isinstance(raw, bool) != (
                metric == "success") or not isinstance(raw, (int, float)):
            return
        self._guard.observe(playbook_id, version, float(raw))


class GuardStage(Stage):
    name = STAGE
    consumes = GUARD.consumes

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.guard = Guard(GuardRule(alpha=settings.guard_alpha, tau=settings.guard_tau,
                                     min_traces=settings.guard_min_traces, metric=settings.guard_metric))
        self._promoted_view: LogView | None = None
        self._playbook_view: LogView | None = None

    async def prepare(self) -> None:
        self._promoted_view = LogView(self, Topic.PROMOTED, self._apply_decision)
        self._playbook_view = LogView(self, Topic.PLAYBOOK, self._apply_version)
        for view in (self._playbook_view, self._promoted_view):
            await view.start()
        await LiveValues(self, self.guard).start()

    def _apply_version(self, record: ConsumerRecord) -> None:
        version = self.read_state(record, PlaybookVersion)
        if version is not None:
            self.guard.apply_version(version)

    def _apply_decision(self, record: ConsumerRecord) -> None:
        assert self._promoted_view is not None
        take_decision(self, self._promoted_view, record, self.guard.apply_decision)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        for view in self.views:
            await view.catch_up()

    async def handle(self, record: ConsumerRecord, value: bytes | None) -> None:
        self.done(record)  # decisions are taken from the promoted view; the group only gives ownership

    async def tick(self, now: float) -> None:
        for playbook_id in self.guard.playbooks():
            self.guard.advance(playbook_id)
            if self.guard.waiting(playbook_id):  # a trace names a version not seen yet: is there one?
                assert self._playbook_view is not None
                await self._playbook_view.catch_up()
                self.guard.advance(playbook_id)
                await perform(self, self.guard.drop_unknown(playbook_id))
            if self.owns_key(playbook_id):
                await perform(self, self.guard.decide(playbook_id, utc_now()), self._write_decision)

    async def _write_decision(self, publish: Publish) -> bool:
        assert self._promoted_view is not None
        decision = await write_decision(self, self._promoted_view, publish)
        if decision is not None:
            log.warning("%s: guard rolled back v%s to v%d (%s)", decision.playbook_id, decision.candidate_version,
                        decision.served_version, decision.reason)
        return decision is not None
