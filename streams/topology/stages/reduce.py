"""Root reducer: when the k partials of batch v are in, reduce them (scan tree, fan-in <= max_fan_in), apply the
result to playbook v and publish v+1 with its lineage; then publish the batch's metrics for the controller.

Versions are contiguous (batch b is applied to version b and gives b+1); partials of later batches wait. State is
three numbered logs (``NumberedLog``): ``playbook`` (a version counts only when it is the first of its number there;
a foreign one for an owned playbook rebuilds the partition), ``batches`` (each pending batch's traces: a trace that
reached no aggregator window becomes a dead letter) and ``promoted`` (what the next version is built on).

The decisions are ``combee_core.reduce.processor``'s (partials, the scan, the version, its effects, what it says)
and ``reducer_state``'s (the base of the next version, stalled batches); this stage keeps the views and the task per
playbook that applies ready batches in order (``streams.topology.key_tasks``), and performs the effects.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.model_notice import EmptyVersionNotice
from combee_core.models import BatchManifest, Operation, PartialUpdate, PlaybookVersion, PromotionDecision, utc_now
from combee_core.playbook.embedding_models import embedder_from
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.topology import REDUCE, Topic
from streams.topology.effects import perform
from streams.topology.key_tasks import KeyTasks
from streams.topology.runtime import Stage
from streams.topology.views.numbered_log import NumberedLog


class ReducerStage(Stage):
    spec = REDUCE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.reducer: Reducer
        """Made by :meth:`prepare`, once the embedding model is loaded."""
        self.logs = ReducerLogs(promotion=settings.promotion)
        self.workers = KeyTasks(self, self._apply_ready, "reduce")
        self.versions = NumberedLog[PlaybookVersion](self, Topic.PLAYBOOK, self._take_version, guarded=True,
                                                     checkpointed=True)
        self.batches = NumberedLog[BatchManifest](self, Topic.BATCHES, self._take_manifest, checkpointed=True)
        self.decisions = NumberedLog[PromotionDecision](self, Topic.PROMOTED, accept=self._take_decision,
                                                        gate=self.logs.ledger.gate)

    async def prepare(self) -> None:
        # Loading the embedding model takes about a second of CPU: in a thread, so that the event loop meanwhile
        # keeps the group joins (started with ``prepare``) and the other stages' reads going.
        embedder = await asyncio.to_thread(embedder_from, self.settings)
        self.reducer = Reducer(ReducerConfig.from_settings(self.settings), self._reduce, embedder,
                               EmptyVersionNotice(self.settings.reflector_model))
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
            self.workers.kick(decision.playbook_id)
        return counts

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        playbooks = [pb for pb in sorted({*self.reducer.pending, *self.workers.keys()})
                     if self.owner_partition(pb) in revoked]
        await self.workers.cancel(playbooks)
        for playbook_id in playbooks:
            self.reducer.release(playbook_id)

    async def handle(self, record: ConsumerRecord, partial: PartialUpdate) -> None:
        redelivered = self.reducer.take(partial, record, self.logs.playbook(partial.playbook_id).version)
        if redelivered is not None:
            await perform(self, redelivered)
        else:
            self.workers.kick(partial.playbook_id)

    async def _apply_ready(self, playbook_id: str) -> None:
        """Publish the playbook's ready batches as versions in order, until one is missing or another writer's
        version came first (a base awaiting its promotion decision: ``_take_decision`` kicks again)."""
        while self.owns_key(playbook_id) and (base := self.logs.base(playbook_id)) is not None:
            playbook, parent_version = base
            if (partials := self.reducer.ready(playbook_id, playbook.version)) is None:
                return
            previous_at = self.logs.published_at.get(playbook_id) if playbook.version > 0 else None
            effects = await self.reducer.next_version(playbook, partials, parent_version=parent_version,
                                                      manifest=await self._manifest(playbook_id, partials[0].batch_id),
                                                      previous_at=previous_at, now=utc_now())
            if not await perform(self, effects, self.versions.write):
                return
            self.reducer.published(effects, time.monotonic())

    async def _manifest(self, playbook_id: str, batch_id: int) -> BatchManifest | None:
        if batch_id not in self.logs.manifests.get(playbook_id, {}):
            await self.batches.catch_up()
        return self.logs.manifests.get(playbook_id, {}).get(batch_id)

    async def _reduce(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        result = await self.ctx.roles.reduce(children, context)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)

    async def tick(self, now: float) -> None:
        """Warn once per batch that has waited longer than ``stall_warning_s`` for its version."""
        owned = {pb for pb in self.logs.manifests if self.owns_key(pb)}
        await perform(self, self.reducer.stalled(self.logs.stalled(owned, utc_now(), self.settings.stall_warning_s)))

    async def drain(self) -> None:
        await self.wait_background()
