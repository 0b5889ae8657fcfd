"""Batcher / shuffler: reflections -> batches (windows) -> p shuffled copies per reflection on the shuffle topic.

A batch closes at the playbook's current batch size (from the control topic, or the configured size) or after
``max_wait_s`` with at least one reflection. Batch ids are 0, 1, 2, ... per playbook and survive restarts: the
batcher rebuilds them, and the set of trace_ids already batched, from the ``batches`` topic before consuming.

A batch's manifest is published before its copies, so its membership is fixed even if the process dies before every
copy is out; reflections are committed only after the copies, so after a restart they come back, and the batch's
copies are re-dealt from the manifest and sent again (``UnconfirmedBatches``; aggregators drop copies they have).

Ownership (docs/architecture.md, "Scaling out"): the batcher keeps a live view of ``batches`` for every playbook,
where the first manifest of each (playbook, batch_id) in the log is that batch (``ContiguousNumbers``). It forms
batches only for playbooks on the reflection partitions it owns; after writing a manifest it waits to see it in the
view, and sends the copies only when its manifest is the one that counts. On revocation it drops the open batches of
those partitions (their reflections come back to the next owner); on assignment it catches the view up to the end
and re-arms the unconfirmed batches of the newly owned playbooks.

With ``batch_plan_topic`` set (replay), batches are not closed by size or time: they follow the recorded manifests of
that topic (``PlannedBatches``), and a reflection the plan does not list is a dead letter.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.batching import BatchAccumulator, ClosedBatch, PlannedBatches, ShuffleConfig, UnconfirmedBatches
from combee_core.log_order import ContiguousNumbers
from combee_core.models import BatchManifest, ControlDecision, Reflection, utc_now
from streams.log_view import GatedState, LogView
from streams.runtime import Stage, read_topic

log = logging.getLogger(__name__)

STAGE = "batch"
UNCONFIRMED_KEEP = 8
"""Per playbook, the latest batches whose copies a new owner re-sends when all their reflections come back."""


class BatcherStage(Stage):
    name = STAGE
    consumes = ("reflections",)
    input_model = Reflection
    input_label = "reflection"

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
        self.unconfirmed = UnconfirmedBatches(shuffle, keep_per_playbook=UNCONFIRMED_KEEP)
        self._shuffle = shuffle
        self.plan: PlannedBatches | None = None
        self._planned_records: dict[str, list[ConsumerRecord]] = {}
        self._open_records: dict[str, list[ConsumerRecord]] = {}
        self._resend_records: dict[tuple[str, int], list[ConsumerRecord]] = {}
        self._last_decision: dict[str, int] = {}
        self._valid = ContiguousNumbers[str]()
        self._view_state = GatedState(self._valid)
        self._recent: dict[str, deque[BatchManifest]] = {}
        self._dirty: set[str] = set()
        self._redelivery_end: dict[TopicPartition, int | None] = {}
        self._batches_view: LogView | None = None

    async def prepare(self) -> None:
        if self.settings.batch_plan_topic:
            planned = await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.batch_plan_topic)
            self.plan = PlannedBatches(self._shuffle, [BatchManifest.from_json_bytes(r.value) for r in planned])
            log.info("following the batch plan of %s (%d batches)", self.settings.batch_plan_topic, len(planned))
        self._batches_view = LogView(self, "batches", self._apply_manifest, self._view_state)
        await self._batches_view.start()
        if self.settings.auto_batch_size:
            # Every batcher replica needs every decision, so the control topic is followed outside the consumer
            # group (a group would hand its one partition to one replica only).
            control = LogView(self, "control", self._apply_control)
            await control.start()
            await control.catch_up()

    # ------------------------------------------------------------------------------------------ state views

    def _apply_manifest(self, record: ConsumerRecord) -> None:
        """Take one record of ``batches`` in log order: the first manifest of each batch id counts."""
        manifest = self.read_state(record, BatchManifest)
        if manifest is None:
            return
        assert self._batches_view is not None
        playbook_id = manifest.playbook_id
        origin = self._batches_view.origin(record, (playbook_id, manifest.batch_id),
                                           self._valid.accept(playbook_id, manifest.batch_id))
        if origin == "void":
            self.ctx.count("void_manifests")
            return
        if origin == "other" and self.owns_key(playbook_id):
            log.warning("batch %s/%d was written by another batcher while this one owns the playbook",
                        playbook_id, manifest.batch_id)
            # Its traces may be in the open batch: drop that batch now (its records come back after the reset),
            # so that no later close re-batches them.
            self.accumulator.drop_open(playbook_id)
            self._open_records.pop(playbook_id, None)
            self._dirty.add(playbook_id)
            self.mark_stale(self.owner_partition(playbook_id))
        self.accumulator.restore(manifest)
        points = self._view_state.points  # a restart needs the manifests within the dedupe horizon
        points.add(playbook_id, record.offset, manifest.batch_id, manifest.n)
        points.keep_newest(playbook_id, self.settings.dedupe_horizon, at_least=UNCONFIRMED_KEEP)
        if self.plan is not None:
            self.plan.restore(manifest)
        self._recent.setdefault(playbook_id, deque(maxlen=UNCONFIRMED_KEEP)).append(manifest)

    def _apply_control(self, record: ConsumerRecord) -> None:
        decision = self.read_state(record, ControlDecision)
        if decision is None or decision.decision_id <= self._last_decision.get(decision.playbook_id, -1):
            return
        self._last_decision[decision.playbook_id] = decision.decision_id
        self.accumulator.set_target(decision.playbook_id, decision.batch_size)
        log.info("batch size for %s is now %d (%s)", decision.playbook_id, decision.batch_size, decision.phase)

    # ------------------------------------------------------------------------------------------ ownership

    def _playbooks_of(self, partitions: set[TopicPartition]) -> list[str]:
        return [pb for pb in self.accumulator.playbook_ids() if self.owner_partition(pb) in partitions]

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        for playbook_id in self._playbooks_of(revoked):
            self.accumulator.drop_open(playbook_id)
            self.unconfirmed.forget_playbook(playbook_id)
            self._open_records.pop(playbook_id, None)
            for key in [key for key in self._resend_records if key[0] == playbook_id]:
                del self._resend_records[key]
        for tp in revoked:
            self._redelivery_end.pop(tp, None)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self._batches_view is not None
        await self._batches_view.catch_up()
        for playbook_id in sorted(self._dirty):
            await self._rebuild_playbook(playbook_id)
        self._dirty.clear()
        for playbook_id in self._playbooks_of(assigned):
            self.unconfirmed.forget_playbook(playbook_id)
            for manifest in self._recent.get(playbook_id, ()):
                self.unconfirmed.restore(manifest)
        for tp in assigned:
            self._redelivery_end[tp] = None

    async def _rebuild_playbook(self, playbook_id: str) -> None:
        """After losing a batch id to another writer: this playbook's state again from the ``batches`` log alone."""
        self.accumulator.forget_playbook(playbook_id)
        valid = ContiguousNumbers[str]()
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("batches")):
            manifest = self.read_state(record, BatchManifest)
            if manifest is not None and manifest.playbook_id == playbook_id and valid.accept(
                    playbook_id, manifest.batch_id):
                self.accumulator.restore(manifest)

    async def _confirm_redelivered(self) -> None:
        """Once a newly owned partition is read past its end at assignment, every batch not fully redelivered was
        confirmed before: release the reflections held for it (a client's partial resend must not pin the offset)."""
        if self._consumer is None:
            return
        for tp, end in list(self._redelivery_end.items()):
            if tp not in self.assigned:
                continue
            if end is None:
                self._redelivery_end[tp] = self._consumer.highwater(tp)
                continue
            if await self._consumer.position(tp) < end:
                continue
            del self._redelivery_end[tp]
            for playbook_id in self._playbooks_of({tp}):
                self.unconfirmed.forget_playbook(playbook_id)
                for key in [key for key in self._resend_records if key[0] == playbook_id]:
                    for record in self._resend_records.pop(key):
                        self.ctx.count("duplicate_traces")
                        self.done(record)

    # ------------------------------------------------------------------------------------------ records

    async def handle(self, record: ConsumerRecord, reflection: Reflection) -> None:
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
        await self._confirm_redelivered()
        for closed in self.accumulator.close_expired(now, self.settings.max_wait_s, utc_now()):
            await self._publish(closed)

    async def _duplicate(self, reflection: Reflection, record: ConsumerRecord) -> None:
        """A trace already batched: a client's resend, or a redelivery after a crash (see UnconfirmedBatches); or
        another trace under a taken trace_id (a dead letter: the first one is the one learned)."""
        learned = self.accumulator.conflicting_digest(reflection)
        if learned is not None:
            await self.reject(record, f"trace_id {reflection.trace_id} was sent again with different content (digest "
                              f"{reflection.trace_digest}); the trace batched first under this id (digest {learned}) "
                              "is the one learned, this one is not", "ConflictingTrace",
                              trace_id=reflection.trace_id, playbook_id=reflection.playbook_id)
            return
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
        """Manifest first (it fixes the batch's membership for good, if it is the first of its id), then the
        copies, then commit."""
        assert self._batches_view is not None
        manifest = batch.manifest
        key = (manifest.playbook_id, manifest.batch_id)
        if not await self._batches_view.write(key, manifest.to_json_bytes()):
            self.ctx.count("batches_lost")
            log.warning("batch %s/%d: another batcher's manifest came first; re-forming from the log", *key)
            self._dirty.add(manifest.playbook_id)
            self.mark_stale(self.owner_partition(manifest.playbook_id))
            return
        if not self.owns_key(manifest.playbook_id):
            return  # revoked meanwhile: the next owner re-sends the copies from the manifest
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
