"""Batcher / shuffler: reflections -> batches -> p shuffled copies per reflection on the shuffle topic.

A batch is due at the playbook's current batch size (the controller's decision on ``control``, or the configured
size), after ``max_wait_s`` or idle, or as the recorded plan says (replay, ``batch_plan_topic``); in an async fleet it
closes when the version chain can take it (``combee_core.batch.chain_pacing``: the stage follows ``playbook`` to know
which batches are versions). Its manifest is a numbered
record of ``batches`` (``NumberedLog``: the first manifest of each (playbook, batch_id) is that batch); the copies go
out, and the reflections are committed, only once the manifest counts, so after a restart the reflections come back
and the copies are re-dealt from the manifest (``UnconfirmedBatches``; aggregators drop copies they have). A foreign
manifest for an owned playbook drops its open batch and rebuilds the partition (docs/architecture.md, "Scaling out").

The decisions (and which playbooks are stale) are ``combee_core.batch.processor``'s, what it knows of each input
partition ``streams.topology.input_partitions``'s; this stage keeps the views and ownership and performs the effects.
"""

from __future__ import annotations

import logging
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.batch.processor import UNCONFIRMED_KEEP, Batcher, BatcherConfig
from combee_core.models import BatchManifest, ControlDecision, PlaybookVersion, Reflection, utc_now
from combee_core.processors.effects import Effect, Publish
from combee_core.topology import BATCH, Topic
from streams.topology.effects import perform
from streams.topology.input_partitions import InputPartitions
from streams.topology.runtime import Stage
from streams.topology.topic_reader import read_topic
from streams.topology.views.log_view import LogView, model_view
from streams.topology.views.numbered_log import NumberedLog

log = logging.getLogger(__name__)


class BatcherStage(Stage):
    spec = BATCH

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.config = BatcherConfig.from_settings(ctx.settings)
        self.batcher = Batcher(self.config)
        self.batches = NumberedLog[BatchManifest](
            self, Topic.BATCHES, self._take_manifest, guarded=True, checkpointed=True,
            on_foreign=lambda pb: self.batcher.foreign_write(pb), on_lost=lambda pb: self.batcher.lost_write(pb))
        self.inputs = InputPartitions(self)

    async def prepare(self) -> None:
        if self.settings.batch_plan_topic:
            planned = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.batch_plan_topic)
            self.batcher = Batcher(self.config, [BatchManifest.from_json_bytes(r.value) for r in planned])
            log.info("following the batch plan of %s (%d batches)", self.settings.batch_plan_topic, len(planned))
        await self.batches.start()
        if self.config.pacing is not None and not self.settings.batch_plan_topic:
            # Which batches the chain has built: a batch held for the chain closes once the previous one is a version.
            versions = model_view(self, Topic.PLAYBOOK, PlaybookVersion,
                                  lambda v: self.batcher.take_version(v.playbook_id, v.batch_id))
            await versions.start()
            await versions.catch_up()
        if self.settings.auto_batch_size:
            # Every batcher replica needs every decision, so the control topic is followed outside the consumer
            # group (a group would hand its one partition to one replica only).
            control = LogView(self, Topic.CONTROL, self._apply_control, catch_up_on_assign=True)
            await control.start()
            await control.catch_up()

    def _take_manifest(self, manifest: BatchManifest, offset: int) -> None:
        points = self.batches.state.points  # a restart needs the manifests within the dedupe horizon
        points.add(manifest.playbook_id, offset, manifest.batch_id, manifest.n)
        points.keep_newest(manifest.playbook_id, self.settings.dedupe_horizon, at_least=UNCONFIRMED_KEEP)
        self.batcher.restore(manifest)

    def _apply_control(self, record: ConsumerRecord) -> None:
        decision = self.read_state(record, ControlDecision)
        if decision is not None and self.batcher.take_decision(decision):
            log.info("batch size for %s is now %d (%s)", decision.playbook_id, decision.batch_size, decision.phase)

    def _playbooks_of(self, partitions: set[TopicPartition]) -> list[str]:
        return [pb for pb in self.batcher.playbook_ids() if self.owner_partition(pb) in partitions]

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        for playbook_id in self._playbooks_of(revoked):
            self.batcher.release(playbook_id)
        self.inputs.revoked(revoked)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        playbooks = self._playbooks_of(assigned)
        if self.batcher.stale.intersection(playbooks):  # after losing a batch id: their state again from the log
            records = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic(Topic.BATCHES))
            self.batcher.rebuild_stale([m for m in (self.read_state(r, BatchManifest) for r in records) if m],
                                       playbooks)
        for playbook_id in playbooks:
            self.batcher.rearm(playbook_id)
        self.inputs.assigned(assigned)

    async def handle(self, record: ConsumerRecord, reflection: Reflection) -> None:
        self.inputs.took(record)
        await self._perform(self.batcher.take(reflection, record, time.monotonic(), utc_now()))

    async def tick(self, now: float) -> None:
        for playbook_id in self._playbooks_of(await self.inputs.redelivered()):
            await self._perform(self.batcher.confirm(playbook_id))  # its reflections held for a re-send: released
        for effects in self.batcher.close_due(now, utc_now(), self._playbooks_of(self.inputs.drained())):
            await self._perform(effects)  # each batch on its own: one manifest that does not count stops only its own

    async def _perform(self, effects: list[Effect]) -> None:
        await perform(self, effects, self._write_manifest)

    async def _write_manifest(self, publish: Publish) -> bool:
        """A batch's manifest: True (send its copies, acknowledge its reflections) only when it is the first of its
        id and this stage still owns the playbook (else the next owner re-sends the copies from the manifest)."""
        manifest = publish.value
        assert isinstance(manifest, BatchManifest)
        if not await self.batches.write(publish) or not self.owns_key(manifest.playbook_id):
            return False
        log.info("batch %s/%d closed by %s: n=%d k=%d p=%d", manifest.playbook_id, manifest.batch_id,
                 manifest.closed_by, manifest.n, manifest.k, manifest.p)
        return True
