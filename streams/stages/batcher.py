"""Batcher / shuffler: reflections -> batches (windows) -> p shuffled copies per reflection on the shuffle topic.

A batch closes at the playbook's current batch size (from the control topic, or the configured size) or after
``max_wait_s`` with at least one reflection. Batch ids are 0, 1, 2, ... per playbook and survive restarts: the
batcher rebuilds them, and the set of trace_ids already batched, from the ``batches`` topic before consuming.

A batch's manifest is published before its copies, so its membership is fixed even if the process dies before every
copy is out; reflections are committed only after the copies, so after a restart they come back, and the batch's
copies are re-dealt from the manifest and sent again (``UnconfirmedBatches``; aggregators drop copies they have).

With ``batch_plan_topic`` set (replay), batches are not closed by size or time: they follow the recorded manifests of
that topic (``PlannedBatches``), and a reflection the plan does not list is a dead letter.
"""

from __future__ import annotations

import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.batching import BatchAccumulator, ClosedBatch, PlannedBatches, ShuffleConfig, UnconfirmedBatches
from combee_core.models import BatchManifest, ControlDecision, Reflection, utc_now
from streams.dead_letters import make_dead_letter
from streams.runtime import Stage, consumer_config, read_topic

log = logging.getLogger(__name__)

STAGE = "batch"


class BatcherStage(Stage):
    name = STAGE
    consumes = ("reflections",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        shuffle = ShuffleConfig(
            run_seed=settings.run_seed, p=settings.p, max_fan_in=settings.max_fan_in, subgroups=settings.subgroups
        )
        self.accumulator = BatchAccumulator(
            shuffle, default_batch_size=settings.batch_size, dedupe_horizon=settings.dedupe_horizon
        )
        self._horizon_reported: set[str] = set()
        self.unconfirmed = UnconfirmedBatches(shuffle)
        self._shuffle = shuffle
        self.plan: PlannedBatches | None = None
        self._planned_records: dict[str, list[ConsumerRecord]] = {}
        self._open_records: dict[str, list[ConsumerRecord]] = {}
        self._resend_records: dict[tuple[str, int], list[ConsumerRecord]] = {}
        self._last_decision: dict[str, int] = {}

    async def prepare(self) -> None:
        if self.settings.batch_plan_topic:
            planned = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.batch_plan_topic)
            self.plan = PlannedBatches(self._shuffle, [BatchManifest.from_json_bytes(r.value) for r in planned])
            log.info("following the batch plan of %s (%d batches)", self.settings.batch_plan_topic, len(planned))
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("batches")):
            manifest = BatchManifest.from_json_bytes(record.value)
            self.accumulator.restore(manifest)
            self.unconfirmed.restore(manifest)
            if self.plan is not None:
                self.plan.restore(manifest)
        if self.settings.auto_batch_size:
            next_offset = 0
            for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("control")):
                next_offset = record.offset + 1
                self._apply_decision(ControlDecision.from_json_bytes(record.value))
            # Every batcher replica needs every decision, so the control topic is followed outside the consumer
            # group (a group would hand its one partition to one replica only).
            self.spawn(self._follow_control(next_offset), name="batcher-control")

    async def _follow_control(self, offset: int) -> None:
        """Apply new control decisions until the worker stops; an unreadable one becomes a dead letter."""
        consumer = AIOKafkaConsumer(**consumer_config(self.ctx.bootstrap, self.ctx.profile, None))
        await consumer.start()
        try:
            tp = TopicPartition(self.settings.topic("control"), 0)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            while not self.ctx.stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for record in batch.get(tp, []):
                    try:
                        self._apply_decision(ControlDecision.from_json_bytes(record.value))
                    except (ValueError, ValidationError) as error:
                        await self.ctx.dead_letter(make_dead_letter(
                            self.name, f"unreadable control decision: {error}", error, record.value,
                            topic=record.topic, partition=record.partition, offset=record.offset, key=record.key))
        finally:
            await consumer.stop()

    def _apply_decision(self, decision: ControlDecision) -> None:
        if decision.decision_id <= self._last_decision.get(decision.playbook_id, -1):
            return
        self._last_decision[decision.playbook_id] = decision.decision_id
        self.accumulator.set_target(decision.playbook_id, decision.batch_size)
        log.info("batch size for %s is now %d (%s)", decision.playbook_id, decision.batch_size, decision.phase)

    async def handle(self, record: ConsumerRecord) -> None:
        try:
            reflection = Reflection.from_json_bytes(record.value)
        except (ValueError, ValidationError) as error:
            await self.reject(record, f"unreadable reflection: {error}", error)
            return
        if self.accumulator.is_duplicate(reflection):
            await self._duplicate(reflection, record)
            return
        staleness = self.accumulator.next_base_version(reflection.playbook_id) - reflection.seen_version
        limit = self.settings.max_staleness
        if limit is not None and staleness > limit:
            await self.reject(
                record, f"stale: trace ran with version {reflection.seen_version}, {staleness} versions behind "
                f"(max_staleness={limit})", "StaleTrace", trace_id=reflection.trace_id,
                playbook_id=reflection.playbook_id,
            )
            return
        if self.plan is not None:
            await self._follow_plan(reflection, record)
            return
        self._open_records.setdefault(reflection.playbook_id, []).append(record)
        closed = self.accumulator.add(reflection, time.monotonic(), utc_now())
        if closed is not None:
            await self._publish(closed)

    async def _follow_plan(self, reflection: Reflection, record: ConsumerRecord) -> None:
        assert self.plan is not None
        if self.plan.batch_of(reflection) is None:
            await self.reject(record, f"trace {reflection.trace_id} is not in the batch plan "
                              f"({self.settings.batch_plan_topic})", "UnplannedTrace", trace_id=reflection.trace_id,
                              playbook_id=reflection.playbook_id)
            return
        self._planned_records.setdefault(reflection.trace_id, []).append(record)
        for batch in self.plan.add(reflection, utc_now()):
            self.accumulator.restore(batch.manifest)  # dedupe and base versions, as if it had been formed here
            await self._publish(batch)

    async def tick(self, now: float) -> None:
        for closed in self.accumulator.close_expired(now, self.settings.max_wait_s, utc_now()):
            await self._publish(closed)

    async def _duplicate(self, reflection: Reflection, record: ConsumerRecord) -> None:
        """A trace already batched: a client's resend, or a redelivery after a crash (see UnconfirmedBatches)."""
        batch_id = self.unconfirmed.batch_of(reflection)
        if batch_id is None:
            self.ctx.count("duplicate_traces")
            self.done(record)
            return
        key = (reflection.playbook_id, batch_id)
        self._resend_records.setdefault(key, []).append(record)
        batch = self.unconfirmed.collect(reflection)
        if batch is not None:
            await self._send_copies(batch)
            self.ctx.count("batches_resent")
            log.info("re-sent the copies of batch %s/%d after a restart", *key)
            for done in self._resend_records.pop(key, []):
                self.done(done)

    async def _send_copies(self, batch: ClosedBatch) -> None:
        for copy in batch.copies:
            key = f"{copy.playbook_id}/{copy.batch_id}/{copy.subgroup}"
            await self.ctx.send("shuffle", key, copy)
        await self.ctx.producer.flush()

    async def _publish(self, batch: ClosedBatch) -> None:
        """Manifest first (it fixes the batch's membership for good), then the copies, then commit."""
        manifest = batch.manifest
        await self.ctx.send("batches", manifest.playbook_id, manifest, wait=True)
        await self._send_copies(batch)
        self.ctx.count("batches")
        self.ctx.count("shuffled_copies", len(batch.copies))
        log.info("batch %s/%d closed by %s: n=%d k=%d p=%d", manifest.playbook_id, manifest.batch_id,
                 manifest.closed_by, manifest.n, manifest.k, manifest.p)
        for record in self._open_records.pop(manifest.playbook_id, []):
            self.done(record)
        self._report_horizon(manifest.playbook_id)
        for trace_id in manifest.trace_ids if self.plan is not None else ():
            for record in self._planned_records.pop(trace_id, []):
                self.done(record)

    def _report_horizon(self, playbook_id: str) -> None:
        """Say once per playbook when batched trace ids start leaving the dedupe horizon (no silent cap)."""
        if self.accumulator.forgotten(playbook_id) and playbook_id not in self._horizon_reported:
            self._horizon_reported.add(playbook_id)
            self.ctx.count("playbooks_past_dedupe_horizon")
            log.warning("%s: more than %d traces batched; the oldest trace ids are forgotten from now on, so a trace "
                        "resent after %d newer ones would be batched again (dedupe_horizon)", playbook_id,
                        self.settings.dedupe_horizon, self.settings.dedupe_horizon)

    async def drain(self) -> None:
        """Open batches stay uncommitted: their reflections are redelivered after a restart."""
