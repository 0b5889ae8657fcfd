"""Root reducer: when the k partials of batch v are in, reduce them (scan tree, fan-in <= max_fan_in), apply the
result to playbook v and publish v+1 with its lineage; then publish the batch's metrics for the controller.

Versions are contiguous (batch b is applied to version b and gives b+1); partials of later batches wait.

State is a live view of the ``playbook`` log, where the first record of each (playbook, version) is that version
(``ContiguousNumbers``): the reducer never trusts its own write until it sees it there first. A version written by
another reducer for a playbook this one owns (a fenced "zombie") makes it rebuild that partition from the logs. It
also views ``batches`` to know each pending batch's traces: a trace of the batch that reached no aggregator window
becomes a dead letter, and a batch waiting longer than ``stall_warning_s`` for its version is logged.

The decisions (which partials count, when a batch is ready, the scan, the version, its metrics and dead letters) are
``combee_core.processors.reducer``'s; this stage keeps the views and performs its effects
(``streams.topology.effects``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.guard import guarded_base
from combee_core.log_order import ContiguousNumbers
from combee_core.model_notice import EmptyVersionNotice
from combee_core.models import BatchManifest, Operation, PartialUpdate, PlaybookVersion, PromotionDecision, utc_now
from combee_core.playbook import Playbook
from combee_core.playbook.embedding import embedder_from
from combee_core.processors.effects import Publish
from combee_core.processors.reducer import Reducer, ReducerConfig
from combee_core.promotion import PromotionLedger, next_base
from combee_core.reduction import PendingPartials, ReduceOutcome
from combee_core.seed import is_import_version
from combee_core.topology import REDUCE, Topic
from streams.topology.effects import perform
from streams.topology.log_view import GatedState, LogView
from streams.topology.runtime import Stage, cancel_tasks

log = logging.getLogger(__name__)

STAGE = REDUCE.name


class ReducerStage(Stage):
    name = STAGE
    consumes = REDUCE.consumes
    input_model = PartialUpdate
    input_label = "partial"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.playbooks: dict[str, Playbook] = {}
        self.published_at: dict[str, datetime] = {}
        """Per playbook, when its latest version was published (a sync fleet's round time ends at the next)."""
        settings = ctx.settings
        self.reducer = Reducer(ReducerConfig.from_settings(settings), self._reduce, embedder_from(settings))
        self.manifests: dict[str, dict[int, BatchManifest]] = {}
        """Per playbook, the valid manifests of batches not yet in a version."""
        self._workers: dict[str, asyncio.Task] = {}
        self._versions = GatedState(ContiguousNumbers[str](start=1), load=self._load_version)
        self._batches = GatedState(ContiguousNumbers[str]())
        self._stall_reported: set[tuple[str, int]] = set()
        self._playbook_view: LogView | None = None
        self._batches_view: LogView | None = None
        self.ledger = PromotionLedger()
        """The ``promoted`` log, which says what the next version is built on (without promotion: after a rollback)."""
        self.parents: dict[str, dict[int, int]] = {}
        """Per playbook, version -> parent_version (``combee_core.guard.clean``)."""
        self._empty_notice = EmptyVersionNotice(settings.reflector_model)
        """Says when versions come out empty because the reflector is the simulator (``combee_core.model_notice``)."""

    async def prepare(self) -> None:
        self._playbook_view = LogView(self, Topic.PLAYBOOK, self._apply_version, self._versions)
        self._batches_view = LogView(self, Topic.BATCHES, self._apply_manifest, self._batches)
        await self._playbook_view.start()
        await self._batches_view.start()
        await LogView(self, Topic.PROMOTED, self._apply_decision).start()  # without promotion: the guard's rollbacks

    def playbook(self, playbook_id: str) -> Playbook:
        if playbook_id not in self.playbooks:
            self.playbooks[playbook_id] = Playbook.empty(playbook_id)
        return self.playbooks[playbook_id]

    # ------------------------------------------------------------------------------------------ state views

    def _apply_version(self, record: ConsumerRecord) -> None:
        """Take one record of ``playbook`` in log order: the first record of each version number counts."""
        version = self.read_state(record, PlaybookVersion)
        if version is None:
            return
        assert self._playbook_view is not None
        playbook_id = version.playbook_id
        origin = self._playbook_view.origin(record, (playbook_id, version.version),
                                            self._versions.gate.accept(playbook_id, version.version))
        if origin == "void":
            self.ctx.count("void_versions")
            return
        if origin == "other" and self.owns_key(playbook_id):
            imported = is_import_version(version)
            log.log(logging.INFO if imported else logging.WARNING, "%s v%d was written by %s while this one owns the "
                    "playbook", playbook_id, version.version,
                    "`combee playbook import`" if imported else "another reducer")
            self.mark_stale(self.owner_partition(playbook_id), expected=imported)
        self._take_version(version, record.offset)

    def _apply_decision(self, record: ConsumerRecord) -> None:
        """A promotion decision: the version waiting for it can now be built on (``next_base``)."""
        decision = self.read_state(record, PromotionDecision)
        if decision is not None and self.ledger.apply(decision) and decision.playbook_id in self.reducer.pending \
                and self.owns_key(decision.playbook_id):
            self._kick(decision.playbook_id)

    def _base(self, playbook: Playbook) -> tuple[Playbook, int | None] | None:
        """What the next version is built on: this playbook, or with ``promotion`` the version served after the
        decision on it (None while that decision is not on the log yet)."""
        if not self.settings.promotion:
            return guarded_base(playbook, self.ledger, self.parents.get(playbook.playbook_id, {}))
        base = next_base(self.ledger, playbook.playbook_id, playbook.version)
        if base is None:
            return None
        if base.entries is None:
            return playbook, base.parent_version
        return Playbook.from_entries(playbook.playbook_id, playbook.version, base.entries,
                                     playbook.next_entry_number), base.parent_version

    def _load_version(self, record: ConsumerRecord) -> None:
        """A checkpoint's latest version of a playbook (its gate is already set)."""
        version = self.read_state(record, PlaybookVersion)
        if version is not None:
            self._take_version(version, record.offset)

    def _take_version(self, version: PlaybookVersion, offset: int) -> None:
        playbook_id = version.playbook_id
        self.parents.setdefault(playbook_id, {})[version.version] = version.parent_version
        self.playbooks[playbook_id] = Playbook.from_entries(
            playbook_id, version.version, version.entries, version.next_entry_number
        )
        self._versions.latest[playbook_id] = offset
        self.published_at[playbook_id] = version.published_at
        waiting = self.manifests.get(playbook_id, {})
        for batch_id in [b for b in waiting if b < version.version]:
            del waiting[batch_id]
        self._batches.points.drop_below(playbook_id, version.version)

    def _apply_manifest(self, record: ConsumerRecord) -> None:
        manifest = self.read_state(record, BatchManifest)
        if manifest is None or not self._batches.gate.accept(manifest.playbook_id, manifest.batch_id):
            return
        if manifest.batch_id >= self.playbook(manifest.playbook_id).version:
            self.manifests.setdefault(manifest.playbook_id, {})[manifest.batch_id] = manifest
            self._batches.points.add(manifest.playbook_id, record.offset, manifest.batch_id)

    # ------------------------------------------------------------------------------------------ ownership

    def _playbooks_of(self, partitions: set[TopicPartition]) -> list[str]:
        known = set(self.reducer.pending) | set(self._workers)
        return [pb for pb in sorted(known) if self.owner_partition(pb) in partitions]

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        playbooks = self._playbooks_of(revoked)
        await cancel_tasks([self._workers.pop(pb) for pb in playbooks if pb in self._workers])
        for playbook_id in playbooks:
            self.reducer.release(playbook_id)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self._playbook_view is not None and self._batches_view is not None
        for view in self.views:
            await view.catch_up()

    # ------------------------------------------------------------------------------------------ records

    async def handle(self, record: ConsumerRecord, partial: PartialUpdate) -> None:
        redelivered = self.reducer.take(partial, record, self.playbook(partial.playbook_id).version)
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
            base = self._base(self.playbook(playbook_id))
            if base is None:
                return  # the latest version awaits its promotion decision; _apply_decision kicks again
            playbook, parent_version = base
            partials = self.reducer.ready(playbook_id, playbook.version)
            if partials is None or not await self._publish_version(playbook, partials, parent_version):
                return

    async def _publish_version(self, playbook: Playbook, partials: list[PartialUpdate],
                               parent_version: int | None = None) -> bool:
        """Build and publish the next version; False when another writer's version came first."""
        playbook_id = playbook.playbook_id
        previous_at = self.published_at.get(playbook_id) if playbook.version > 0 else None
        manifest = await self._manifest(playbook_id, partials[0].batch_id)
        effects = await self.reducer.next_version(playbook, partials, parent_version=parent_version,
                                                  manifest=manifest, previous_at=previous_at, now=utc_now())
        if not await perform(self, effects, self._write_version):
            return False
        [record] = [e.value for e in effects if isinstance(e, Publish) and e.topic == Topic.PLAYBOOK]
        assert isinstance(record, PlaybookVersion)
        log.info("published %s v%d (batch %d, %d entries, %d ops, delay %.2fs)", playbook_id, record.version,
                 record.batch_id, len(record.entries), len(record.operations), record.stats.delay_s)
        if notice := self._empty_notice.observe(playbook_id, record.version, len(record.operations),
                                                len(record.lineage), time.monotonic()):
            log.warning("%s", notice)
        return True

    async def _write_version(self, publish: Publish) -> bool:
        """A new version counts only when it is the first of its number in ``playbook``."""
        assert self._playbook_view is not None and publish.number is not None
        if not await self._playbook_view.write(publish.number, publish.value.to_json_bytes()):
            self.ctx.count("versions_lost")
            log.warning("%s v%d: another reducer's version came first; rebuilding from the log", *publish.number)
            self.mark_stale(self.owner_partition(publish.number[0]))
            return False
        return True

    async def _manifest(self, playbook_id: str, batch_id: int) -> BatchManifest | None:
        assert self._batches_view is not None
        manifest = self.manifests.get(playbook_id, {}).get(batch_id)
        if manifest is None:
            await self._batches_view.catch_up()
            manifest = self.manifests.get(playbook_id, {}).get(batch_id)
        if manifest is None:
            log.warning("%s batch %d: manifest not found; the version's lineage is not checked against it",
                        playbook_id, batch_id)
        return manifest

    async def _reduce(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        result = await self.ctx.roles.reduce(children, context)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)

    async def tick(self, now: float) -> None:
        """Warn once per batch that has waited longer than ``stall_warning_s`` for its version."""
        wall = utc_now()
        for playbook_id, waiting in self.manifests.items():
            if not waiting or not self.owns_key(playbook_id):
                continue
            oldest = waiting[min(waiting)]
            age = (wall - oldest.closed_at).total_seconds()
            key = (playbook_id, oldest.batch_id)
            if age > self.settings.stall_warning_s and key not in self._stall_reported:
                self._stall_reported.add(key)
                self.ctx.count("stalled_batches")
                log.warning("%s: batch %d (%d traces) closed %.0f s ago and is still not a version (partials %s)",
                            playbook_id, oldest.batch_id, oldest.n, age,
                            self._waiting(playbook_id).get(oldest.batch_id, "none"))

    def _waiting(self, playbook_id: str) -> dict[int, tuple[int, int]]:
        return self.reducer.pending.get(playbook_id, PendingPartials()).waiting()

    async def drain(self) -> None:
        await self.wait_background()

