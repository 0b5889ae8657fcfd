"""Batcher / shuffler: reflections -> batches -> p shuffled copies per reflection on the shuffle topic.

A batch closes at the playbook's current batch size (the controller's decision on ``control``, or the configured
size), after ``max_wait_s``, or as the recorded plan says (replay, ``batch_plan_topic``). Its manifest is a numbered
record of ``batches`` (``NumberedLog``: the first manifest of each (playbook, batch_id) is that batch); the copies go
out, and the reflections are committed, only once the manifest counts, so after a restart the reflections come back
and the copies are re-dealt from the manifest (``UnconfirmedBatches``; aggregators drop copies they have). A foreign
manifest for an owned playbook drops its open batch and rebuilds the partition (docs/architecture.md, "Scaling out").

The decisions are ``combee_core.processors.batcher``'s; this stage keeps the views, ownership (open batches dropped
on revocation, unconfirmed batches re-armed on assignment) and performs the effects.
"""

from __future__ import annotations

import logging
import time

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord

from combee_core.batch.batching import UPSTREAM_DRAINED, BatchAccumulator
from combee_core.models import BatchManifest, ControlDecision, Reflection, utc_now
from combee_core.processors.batcher import UNCONFIRMED_KEEP, Batcher, BatcherConfig
from combee_core.processors.effects import Effect, Publish
from combee_core.topology import BATCH, Topic
from streams.topology.effects import perform
from streams.topology.log_view import LogView
from streams.topology.numbered_log import NumberedLog
from streams.topology.runtime import Stage
from streams.topology.topic_reader import read_topic

log = logging.getLogger(__name__)



def upstream_drained(record: ConsumerRecord) -> bool:
    """Did the reflector publish this reflection with no trace of its partition left to reflect?"""
    return any(key == UPSTREAM_DRAINED for key, _ in record.headers or ())


class BatcherStage(Stage):
    spec = BATCH
    input_model = Reflection
    input_label = "reflection"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.config = BatcherConfig.from_settings(ctx.settings)
        self.batcher = Batcher(self.config)
        self._dirty: set[str] = set()
        self._redelivery_end: dict[TopicPartition, int | None] = {}
        self.batches = NumberedLog[BatchManifest](self, Topic.BATCHES, self._take_manifest, guarded=True,
                                                  checkpointed=True, on_foreign=self._foreign,
                                                  on_lost=self._dirty.add)
        self._drained: dict[TopicPartition, bool] = {}
        """Per reflections partition: did its latest reflection say the reflector had no trace left to reflect?"""

    @property
    def accumulator(self) -> BatchAccumulator:
        return self.batcher.accumulator

    async def prepare(self) -> None:
        if self.settings.batch_plan_topic:
            planned = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.batch_plan_topic)
            self.batcher = Batcher(self.config, [BatchManifest.from_json_bytes(r.value) for r in planned])
            log.info("following the batch plan of %s (%d batches)", self.settings.batch_plan_topic, len(planned))
        await self.batches.start()
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

    def _foreign(self, playbook_id: str) -> None:
        """Another writer's manifest counts for an owned playbook: its traces may be in the open batch, dropped now
        (its records come back after the reset) so that no later close re-batches them; rebuilt at assignment. (A
        write of this stage's that lost only marks the playbook for the rebuild, as before the numbered log: its
        open batch is dropped by the reset's release.)"""
        self.batcher.drop_open(playbook_id)
        self._dirty.add(playbook_id)

    def _apply_control(self, record: ConsumerRecord) -> None:
        decision = self.read_state(record, ControlDecision)
        if decision is not None and self.batcher.take_decision(decision):
            log.info("batch size for %s is now %d (%s)", decision.playbook_id, decision.batch_size, decision.phase)

    def _playbooks_of(self, partitions: set[TopicPartition]) -> list[str]:
        return [pb for pb in self.batcher.playbook_ids() if self.owner_partition(pb) in partitions]

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        for playbook_id in self._playbooks_of(revoked):
            self.batcher.release(playbook_id)
        for tp in revoked:
            self._redelivery_end.pop(tp, None)
            self._drained.pop(tp, None)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        if self._dirty:  # after losing a batch id: those playbooks' state again from the ``batches`` log alone
            records = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic(Topic.BATCHES))
            manifests = [m for m in (self.read_state(r, BatchManifest) for r in records) if m is not None]
            for playbook_id in sorted(self._dirty):
                self.batcher.rebuild(playbook_id, manifests)
            self._dirty.clear()
        for playbook_id in self._playbooks_of(assigned):
            self.batcher.rearm(playbook_id)
        for tp in assigned:
            self._redelivery_end[tp] = None

    async def _confirm_redelivered(self) -> None:
        """Once a newly owned partition is read past its end at assignment, every batch not fully redelivered was
        confirmed before: release the reflections held for it (a client's partial resend must not pin the offset)."""
        if self._consumer is None:
            return
        held = self.held_by_client()
        for tp, end in list(self._redelivery_end.items()):
            if tp not in held:
                continue
            if end is None:
                self._redelivery_end[tp] = self._consumer.highwater(tp)
                continue
            try:
                if await self._consumer.position(tp) < end:
                    continue
            except IllegalStateError:  # dropped by the client while asking: the release follows
                continue
            del self._redelivery_end[tp]
            for playbook_id in self._playbooks_of({tp}):
                await self._perform(self.batcher.confirm(playbook_id))

    async def handle(self, record: ConsumerRecord, reflection: Reflection) -> None:
        self._drained[TopicPartition(record.topic, record.partition)] = upstream_drained(record)
        await self._perform(self.batcher.take(reflection, record, time.monotonic(), utc_now()))

    async def tick(self, now: float) -> None:
        await self._confirm_redelivered()
        drained = self._playbooks_of({tp for tp, flag in self._drained.items() if flag})
        await self._perform(self.batcher.tick(now, utc_now(), drained))

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
