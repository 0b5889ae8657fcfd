"""Root reducer: when the k partials of batch v are in, reduce them (scan tree, fan-in <= max_fan_in), apply the
result to playbook v and publish v+1 with its lineage; then publish the batch's metrics for the controller.

Versions are contiguous (batch b is applied to version b and gives b+1); partials of later batches wait.

State is a live view of the ``playbook`` log, where the first record of each (playbook, version) is that version
(``ContiguousNumbers``): the reducer never trusts its own write until it sees it there first. A version written by
another reducer for a playbook this one owns (a fenced "zombie") makes it rebuild that partition from the logs. It
also views ``batches`` to know each pending batch's traces: a trace of the batch that reached no aggregator window
becomes a dead letter, and a batch waiting longer than ``stall_warning_s`` for its version is logged.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.llm.errors import LLMError
from combee_core.log_order import ContiguousNumbers
from combee_core.models import (
    BatchManifest,
    BatchMetrics,
    Operation,
    PartialUpdate,
    PlaybookVersion,
    PromotionDecision,
    Usage,
    utc_now,
)
from combee_core.playbook import Playbook, render_playbook
from combee_core.promotion import PromotionLedger, next_base
from combee_core.reduction import (
    PendingPartials,
    ReduceOutcome,
    build_version,
    merge_without_conflict,
    reduce_through_scan,
)
from streams.dead_letters import make_dead_letter
from streams.log_view import GatedState, LogView
from streams.runtime import Stage, cancel_tasks

log = logging.getLogger(__name__)

STAGE = "reduce"


class ReducerStage(Stage):
    name = STAGE
    consumes = ("partials",)
    input_model = PartialUpdate
    input_label = "partial"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.playbooks: dict[str, Playbook] = {}
        self.published_at: dict[str, datetime] = {}
        """Per playbook, when its latest version was published (a sync fleet's round time ends at the next)."""
        self.pending: dict[str, PendingPartials] = {}
        self.manifests: dict[str, dict[int, BatchManifest]] = {}
        """Per playbook, the valid manifests of batches not yet in a version."""
        self._records: dict[tuple[str, int], list[ConsumerRecord]] = {}
        self._workers: dict[str, asyncio.Task] = {}
        self._versions = GatedState(ContiguousNumbers[str](start=1), load=self._load_version)
        self._batches = GatedState(ContiguousNumbers[str]())
        self._stall_reported: set[tuple[str, int]] = set()
        self._playbook_view: LogView | None = None
        self._batches_view: LogView | None = None
        self.ledger = PromotionLedger()
        """With ``promotion``: the ``promoted`` log, which says what the next version is built on."""

    async def prepare(self) -> None:
        self._playbook_view = LogView(self, "playbook", self._apply_version, self._versions)
        self._batches_view = LogView(self, "batches", self._apply_manifest, self._batches)
        await self._playbook_view.start()
        await self._batches_view.start()
        if self.settings.promotion:
            await LogView(self, "promoted", self._apply_decision).start()

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
            log.warning("%s v%d was written by another reducer while this one owns the playbook", playbook_id,
                        version.version)
            self.mark_stale(self.owner_partition(playbook_id))
        self._take_version(version, record.offset)

    def _apply_decision(self, record: ConsumerRecord) -> None:
        """A promotion decision: the version waiting for it can now be built on (``next_base``)."""
        decision = self.read_state(record, PromotionDecision)
        if decision is not None and self.ledger.apply(decision) and decision.playbook_id in self.pending \
                and self.owns_key(decision.playbook_id):
            self._kick(decision.playbook_id)

    def _base(self, playbook: Playbook) -> tuple[Playbook, int | None] | None:
        """What the next version is built on: this playbook, or with ``promotion`` the version served after the
        decision on it (None while that decision is not on the log yet)."""
        if not self.settings.promotion:
            return playbook, None
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
        known = set(self.pending) | set(self._workers)
        return [pb for pb in sorted(known) if self.owner_partition(pb) in partitions]

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        playbooks = self._playbooks_of(revoked)
        await cancel_tasks([self._workers.pop(pb) for pb in playbooks if pb in self._workers])
        for playbook_id in playbooks:
            self.pending.pop(playbook_id, None)
            for key in [key for key in self._records if key[0] == playbook_id]:
                del self._records[key]

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self._playbook_view is not None and self._batches_view is not None
        for view in self.views:
            await view.catch_up()

    # ------------------------------------------------------------------------------------------ records

    async def handle(self, record: ConsumerRecord, partial: PartialUpdate) -> None:
        current = self.playbook(partial.playbook_id).version
        pending = self.pending.setdefault(partial.playbook_id, PendingPartials())
        if not pending.add(partial, current):
            self.ctx.count("duplicate_partials")
            self.done(record)
            return
        self._records.setdefault((partial.playbook_id, partial.batch_id), []).append(record)
        self._kick(partial.playbook_id)

    def _kick(self, playbook_id: str) -> None:
        worker = self._workers.get(playbook_id)
        if worker is None or worker.done():
            self._workers[playbook_id] = self.spawn(self._apply_ready(playbook_id), name=f"reduce-{playbook_id}")

    async def _apply_ready(self, playbook_id: str) -> None:
        pending = self.pending[playbook_id]
        while self.owns_key(playbook_id):
            base = self._base(self.playbook(playbook_id))
            if base is None:
                return  # the latest version awaits its promotion decision; _apply_decision kicks again
            playbook, parent_version = base
            partials = pending.pop_ready(playbook.version)
            if partials is None or not await self._publish_version(playbook, partials, parent_version):
                return

    async def _publish_version(self, playbook: Playbook, partials: list[PartialUpdate],
                               parent_version: int | None = None) -> bool:
        """Build and publish the next version; False when another writer's version came first."""
        assert self._playbook_view is not None
        playbook_id = playbook.playbook_id
        previous_at = self.published_at.get(playbook_id) if playbook.version > 0 else None
        scan = await reduce_through_scan(
            [partial.operations for partial in partials], self.settings.max_fan_in,
            self._reduce_call(playbook, partials),
            merge=merge_without_conflict if self.settings.deterministic_merge else None,
        )
        record = build_version(playbook, partials, scan, published_at=utc_now(), parent_version=parent_version,
                               budget_tokens=self.settings.playbook_budget_tokens,
                               delete_cap=self.settings.playbook_delete_cap).record
        manifest = await self._manifest(playbook_id, record.batch_id)
        key = (playbook_id, record.version)
        if not await self._playbook_view.write(key, record.to_json_bytes()):
            self.ctx.count("versions_lost")
            log.warning("%s v%d: another reducer's version came first; rebuilding from the log", *key)
            self.mark_stale(self.owner_partition(playbook_id))
            return False
        await self._dead_letter_unlearned(record, manifest)
        metrics = BatchMetrics(
            playbook_id=playbook_id,
            batch_id=record.batch_id,
            version=record.version,
            batch_size=max(1, record.stats.batch_size),
            k=max(1, record.stats.k),
            delay_s=record.stats.delay_s,
            llm_critical_path_s=record.stats.llm_critical_path_s,
            llm_calls=record.stats.llm_calls,
            round_s=max(0.0, (record.published_at - previous_at).total_seconds()) if previous_at else None,
        )
        await self.ctx.send("metrics", playbook_id, metrics, wait=True)
        self.ctx.count("versions")
        log.info("published %s v%d (batch %d, %d entries, %d ops, delay %.2fs)", playbook_id, record.version,
                 record.batch_id, len(record.entries), len(record.operations), record.stats.delay_s)
        for consumed in self._records.pop((playbook_id, record.batch_id), []):
            self.done(consumed)
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

    async def _dead_letter_unlearned(self, version: PlaybookVersion, manifest: BatchManifest | None) -> None:
        """Traces of the batch that no partial read (every copy's window timed out or failed): a dead letter each,
        so every batched trace ends in exactly one version's lineage or a dead letter."""
        learned = set(version.lineage)
        for trace_id in manifest.trace_ids if manifest is not None else ():
            if trace_id not in learned:
                await self.ctx.dead_letter(make_dead_letter(
                    STAGE, f"trace {trace_id} of batch {version.batch_id} reached no aggregator (its windows closed "
                    f"by timeout or failed): not learned, not in version {version.version}", "NotLearned", b"",
                    trace_id=trace_id, playbook_id=version.playbook_id))

    def _reduce_call(self, playbook: Playbook, partials: list[PartialUpdate]):
        first = partials[0]
        context = render_playbook(playbook, self.settings.llm_context_tokens).text if self.settings.llm_context else ""

        async def reduce(children: list[list[Operation]]) -> ReduceOutcome:
            try:
                result = await self.ctx.roles.reduce(children, context)
                return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)
            except LLMError as error:
                union = [op for ops in children for op in ops]
                await self.ctx.dead_letter(
                    make_dead_letter(STAGE, f"reduce call failed for batch {first.batch_id}; applying the union of "
                                     f"{len(children)} children's operations unmerged: {error}", error,
                                     b"", playbook_id=first.playbook_id)
                )
                return ReduceOutcome(operations=union, usage=Usage(), latency_s=0.0)

        return reduce

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
                            self.pending.get(playbook_id, PendingPartials()).waiting().get(oldest.batch_id, "none"))

    async def drain(self) -> None:
        await self.wait_background()

