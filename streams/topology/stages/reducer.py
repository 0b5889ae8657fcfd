"""Root reducer: when the k partials of batch v are in, reduce them (scan tree, fan-in <= max_fan_in), apply the
result to playbook v and publish v+1 with its lineage; then publish the batch's metrics for the controller.

Versions are contiguous (batch b is applied to version b and gives b+1); partials of later batches wait. State is
three numbered logs (``NumberedLog``): ``playbook`` (a version counts only when it is the first of its number there;
a foreign one for an owned playbook rebuilds the partition), ``batches`` (each pending batch's traces: a trace that
reached no aggregator window becomes a dead letter) and ``promoted`` (what the next version is built on).

The decisions are ``combee_core.processors.reducer``'s (partials, the scan, the version, its effects) and
``combee_core.processors.reducer_state``'s (the base of the next version, stalled batches); this stage keeps the
views, the task per playbook that applies ready batches in order, and performs the effects.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.model_notice import EmptyVersionNotice
from combee_core.models import BatchManifest, Operation, PartialUpdate, PlaybookVersion, PromotionDecision, utc_now
from combee_core.playbook import Playbook
from combee_core.playbook.embedding import embedder_from
from combee_core.processors.effects import Publish
from combee_core.processors.reducer import Reducer, ReducerConfig
from combee_core.processors.reducer_state import ReducerLogs
from combee_core.reduce.reduction import PendingPartials, ReduceOutcome
from combee_core.topology import REDUCE, Topic
from streams.topology.effects import perform
from streams.topology.numbered_log import NumberedLog
from streams.topology.runtime import Stage, cancel_tasks

log = logging.getLogger(__name__)


class ReducerStage(Stage):
    spec = REDUCE
    input_model = PartialUpdate
    input_label = "partial"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.reducer = Reducer(ReducerConfig.from_settings(settings), self._reduce, embedder_from(settings))
        self.logs = ReducerLogs(promotion=settings.promotion)
        self._workers: dict[str, asyncio.Task] = {}
        self.versions = NumberedLog[PlaybookVersion](self, Topic.PLAYBOOK, self._take_version, guarded=True,
                                                     checkpointed=True)
        self.batches = NumberedLog[BatchManifest](self, Topic.BATCHES, self._take_manifest, checkpointed=True)
        self.decisions = NumberedLog[PromotionDecision](self, Topic.PROMOTED, accept=self._take_decision)
        self._empty_notice = EmptyVersionNotice(settings.reflector_model)
        """Says when versions come out empty because the reflector is the simulator (``combee_core.model_notice``)."""

    @property
    def playbooks(self) -> dict[str, Playbook]:
        return self.logs.playbooks

    async def prepare(self) -> None:
        for numbered in (self.versions, self.batches, self.decisions):  # promoted: with promotion off, rollbacks
            await numbered.start()

    def _take_version(self, version: PlaybookVersion, offset: int) -> None:
        self.logs.take_version(version)
        self.versions.state.latest[version.playbook_id] = offset
        self.batches.state.points.drop_below(version.playbook_id, version.version)

    def _take_manifest(self, manifest: BatchManifest, offset: int) -> None:
        if self.logs.take_manifest(manifest):
            self.batches.state.points.add(manifest.playbook_id, offset, manifest.batch_id)

    def _take_decision(self, decision: PromotionDecision) -> bool:
        """A decision that counts: the version waiting for it can now be built on."""
        counts = self.logs.take_decision(decision)
        if counts and decision.playbook_id in self.reducer.pending and self.owns_key(decision.playbook_id):
            self._kick(decision.playbook_id)
        return counts

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        known = set(self.reducer.pending) | set(self._workers)
        playbooks = [pb for pb in sorted(known) if self.owner_partition(pb) in revoked]
        await cancel_tasks([self._workers.pop(pb) for pb in playbooks if pb in self._workers])
        for playbook_id in playbooks:
            self.reducer.release(playbook_id)

    async def handle(self, record: ConsumerRecord, partial: PartialUpdate) -> None:
        redelivered = self.reducer.take(partial, record, self.logs.playbook(partial.playbook_id).version)
        if redelivered is not None:
            await perform(self, redelivered)
        else:
            self._kick(partial.playbook_id)

    def _kick(self, playbook_id: str) -> None:
        worker = self._workers.get(playbook_id)
        if worker is None or worker.done():
            self._workers[playbook_id] = self.spawn(self._apply_ready(playbook_id), name=f"reduce-{playbook_id}")

    async def _apply_ready(self, playbook_id: str) -> None:
        while self.owns_key(playbook_id):
            base = self.logs.base(playbook_id)
            if base is None:
                return  # the latest version awaits its promotion decision; _take_decision kicks again
            playbook, parent_version = base
            partials = self.reducer.ready(playbook_id, playbook.version)
            if partials is None or not await self._publish_version(playbook, partials, parent_version):
                return

    async def _publish_version(self, playbook: Playbook, partials: list[PartialUpdate],
                               parent_version: int | None) -> bool:
        """Build and publish the next version; False when another writer's version came first."""
        playbook_id = playbook.playbook_id
        previous_at = self.logs.published_at.get(playbook_id) if playbook.version > 0 else None
        effects = await self.reducer.next_version(playbook, partials, parent_version=parent_version,
                                                  manifest=await self._manifest(playbook_id, partials[0].batch_id),
                                                  previous_at=previous_at, now=utc_now())
        if not await perform(self, effects, self.versions.write):
            return False
        [record] = [e.value for e in effects if isinstance(e, Publish) and e.topic == Topic.PLAYBOOK]
        assert isinstance(record, PlaybookVersion)
        log.info("published %s v%d (batch %d, %d entries, %d ops, delay %.2fs)", playbook_id, record.version,
                 record.batch_id, len(record.entries), len(record.operations), record.stats.delay_s)
        if notice := self._empty_notice.observe(playbook_id, record.version, len(record.operations),
                                                len(record.lineage), time.monotonic()):
            log.warning("%s", notice)
        return True

    async def _manifest(self, playbook_id: str, batch_id: int) -> BatchManifest | None:
        if batch_id not in self.logs.manifests.get(playbook_id, {}):
            await self.batches.catch_up()
        manifest = self.logs.manifests.get(playbook_id, {}).get(batch_id)
        if manifest is None:
            log.warning("%s batch %d: manifest not found; the version's lineage is not checked against it",
                        playbook_id, batch_id)
        return manifest

    async def _reduce(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        result = await self.ctx.roles.reduce(children, context)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)

    async def tick(self, now: float) -> None:
        """Warn once per batch that has waited longer than ``stall_warning_s`` for its version."""
        owned = {pb for pb in self.logs.manifests if self.owns_key(pb)}
        for stalled in self.logs.stalled(owned, utc_now(), self.settings.stall_warning_s):
            self.ctx.count("stalled_batches")
            waiting = self.reducer.pending.get(stalled.playbook_id, PendingPartials()).waiting()
            log.warning("%s: batch %d (%d traces) closed %.0f s ago and is still not a version (partials %s)",
                        stalled.playbook_id, stalled.manifest.batch_id, stalled.manifest.n, stalled.age_s,
                        waiting.get(stalled.manifest.batch_id, "none"))

    async def drain(self) -> None:
        await self.wait_background()
