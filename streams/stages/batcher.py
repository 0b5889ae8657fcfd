"""Batcher / shuffler: reflections -> batches (windows) -> p shuffled copies per reflection on the shuffle topic.

A batch closes at the playbook's current batch size (from the control topic, or the configured size) or after
``max_wait_s`` with at least one reflection. Batch ids are 0, 1, 2, ... per playbook and survive restarts: the
batcher rebuilds them, and the set of trace_ids already batched, from the ``batches`` topic before consuming.
"""

from __future__ import annotations

import logging
import time

from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.batching import BatchAccumulator, ClosedBatch, ShuffleConfig
from combee_core.models import BatchManifest, ControlDecision, Reflection, utc_now
from streams.runtime import Stage, read_topic

log = logging.getLogger(__name__)

STAGE = "batch"


class BatcherStage(Stage):
    name = STAGE
    consumes = ("reflections", "control")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.accumulator = BatchAccumulator(
            ShuffleConfig(
                run_seed=settings.run_seed, p=settings.p, max_fan_in=settings.max_fan_in, subgroups=settings.subgroups
            ),
            default_batch_size=settings.batch_size,
        )
        self._open_records: dict[str, list[ConsumerRecord]] = {}
        self._last_decision: dict[str, int] = {}

    async def prepare(self) -> None:
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("batches")):
            self.accumulator.restore(BatchManifest.from_json_bytes(record.value))
        if self.settings.auto_batch_size:
            for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("control")):
                self._apply_decision(ControlDecision.from_json_bytes(record.value))

    def _apply_decision(self, decision: ControlDecision) -> None:
        if decision.decision_id <= self._last_decision.get(decision.playbook_id, -1):
            return
        self._last_decision[decision.playbook_id] = decision.decision_id
        self.accumulator.set_target(decision.playbook_id, decision.batch_size)
        log.info("batch size for %s is now %d (%s)", decision.playbook_id, decision.batch_size, decision.phase)

    async def handle(self, record: ConsumerRecord) -> None:
        if record.topic == self.settings.topic("control"):
            if self.settings.auto_batch_size:
                try:
                    self._apply_decision(ControlDecision.from_json_bytes(record.value))
                except (ValueError, ValidationError) as error:
                    await self.reject(record, f"unreadable control decision: {error}", error)
                    return
            self.done(record)
            return
        try:
            reflection = Reflection.from_json_bytes(record.value)
        except (ValueError, ValidationError) as error:
            await self.reject(record, f"unreadable reflection: {error}", error)
            return
        if self.accumulator.is_duplicate(reflection):
            self.ctx.count("duplicate_traces")
            self.done(record)
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
        self._open_records.setdefault(reflection.playbook_id, []).append(record)
        closed = self.accumulator.add(reflection, time.monotonic(), utc_now())
        if closed is not None:
            await self._publish(closed)

    async def tick(self, now: float) -> None:
        for closed in self.accumulator.close_expired(now, self.settings.max_wait_s, utc_now()):
            await self._publish(closed)

    async def _publish(self, batch: ClosedBatch) -> None:
        manifest = batch.manifest
        for copy in batch.copies:
            key = f"{copy.playbook_id}/{copy.batch_id}/{copy.subgroup}"
            await self.ctx.send("shuffle", key, copy)
        await self.ctx.producer.flush()
        await self.ctx.send("batches", manifest.playbook_id, manifest, wait=True)
        self.ctx.count("batches")
        self.ctx.count("shuffled_copies", len(batch.copies))
        log.info("batch %s/%d closed by %s: n=%d k=%d p=%d", manifest.playbook_id, manifest.batch_id,
                 manifest.closed_by, manifest.n, manifest.k, manifest.p)
        for record in self._open_records.pop(manifest.playbook_id, []):
            self.done(record)

    async def drain(self) -> None:
        """Open batches stay uncommitted: their reflections are redelivered after a restart."""
