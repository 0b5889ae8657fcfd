"""Root reducer: when the k partials of batch v are in, reduce them (scan tree, fan-in <= max_fan_in), apply the
result to playbook v and publish v+1 with its lineage; then publish the batch's metrics for the controller.

Versions are contiguous (batch b is applied to version b and gives b+1); partials of later batches wait.
State (the current playbook per id) is rebuilt from the ``playbook`` topic before consuming.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.llm.errors import LLMError
from combee_core.models import BatchMetrics, Operation, PartialUpdate, PlaybookVersion, utc_now
from combee_core.playbook import Playbook
from combee_core.reduction import PendingPartials, ReduceOutcome, build_version, reduce_through_scan
from streams.dead_letters import make_dead_letter
from streams.runtime import Stage, read_topic

log = logging.getLogger(__name__)

STAGE = "reduce"


class ReducerStage(Stage):
    name = STAGE
    consumes = ("partials",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.playbooks: dict[str, Playbook] = {}
        self.pending: dict[str, PendingPartials] = {}
        self._records: dict[tuple[str, int], list[ConsumerRecord]] = {}
        self._workers: dict[str, asyncio.Task] = {}

    async def prepare(self) -> None:
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("playbook")):
            version = PlaybookVersion.from_json_bytes(record.value)
            current = self.playbooks.get(version.playbook_id)
            if current is None or version.version > current.version:
                self.playbooks[version.playbook_id] = Playbook.from_entries(
                    version.playbook_id, version.version, version.entries, version.next_entry_number
                )

    def playbook(self, playbook_id: str) -> Playbook:
        if playbook_id not in self.playbooks:
            self.playbooks[playbook_id] = Playbook.empty(playbook_id)
        return self.playbooks[playbook_id]

    async def handle(self, record: ConsumerRecord) -> None:
        try:
            partial = PartialUpdate.from_json_bytes(record.value)
        except (ValueError, ValidationError) as error:
            await self.reject(record, f"unreadable partial: {error}", error)
            return
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
        while True:
            playbook = self.playbook(playbook_id)
            partials = pending.pop_ready(playbook.version)
            if partials is None:
                return
            await self._publish_version(playbook, partials)

    async def _publish_version(self, playbook: Playbook, partials: list[PartialUpdate]) -> None:
        playbook_id = playbook.playbook_id
        scan = await reduce_through_scan(
            [partial.operations for partial in partials], self.settings.max_fan_in, self._reduce_call(partials)
        )
        new = build_version(playbook, partials, scan, published_at=utc_now())
        record = new.record
        await self.ctx.send("playbook", playbook_id, record, wait=True)
        self.playbooks[playbook_id] = new.playbook
        metrics = BatchMetrics(
            playbook_id=playbook_id,
            batch_id=record.batch_id,
            version=record.version,
            batch_size=max(1, record.stats.batch_size),
            k=max(1, record.stats.k),
            delay_s=record.stats.delay_s,
            llm_critical_path_s=record.stats.llm_critical_path_s,
            llm_calls=record.stats.llm_calls,
        )
        await self.ctx.send("metrics", playbook_id, metrics, wait=True)
        self.ctx.count("versions")
        log.info("published %s v%d (batch %d, %d entries, %d ops, delay %.2fs)", playbook_id, record.version,
                 record.batch_id, len(record.entries), len(record.operations), record.stats.delay_s)
        for consumed in self._records.pop((playbook_id, record.batch_id), []):
            self.done(consumed)

    def _reduce_call(self, partials: list[PartialUpdate]):
        first = partials[0]

        async def reduce(children: list[list[Operation]]) -> ReduceOutcome:
            try:
                result = await self.ctx.llm.reduce(children)
                return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)
            except LLMError as error:
                union = [op for ops in children for op in ops]
                await self.ctx.dead_letter(
                    make_dead_letter(STAGE, f"reduce call failed for batch {first.batch_id}; applying the union of "
                                     f"{len(children)} children's operations unmerged: {error}", error,
                                     b"", playbook_id=first.playbook_id)
                )
                return ReduceOutcome(operations=union, usage=_no_usage(), latency_s=0.0)

        return reduce

    async def drain(self) -> None:
        await self.wait_background()


def _no_usage():
    from combee_core.models import Usage

    return Usage()
