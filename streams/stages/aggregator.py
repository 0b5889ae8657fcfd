"""Windowed aggregators: one window per (playbook, batch, subgroup); one LLM call per complete window.

A window completes at its expected count of copies; after ``window_timeout_s`` it closes with what it has and the
partial says how many copies were missing. Redelivered and late copies never change a result.

On revocation the windows of the revoked partitions are dropped and their calls in flight cancelled: their copies
are uncommitted, so the next owner forms the same windows again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.llm.errors import LLMError
from combee_core.models import PartialUpdate, ShuffledReflection
from combee_core.playbook import render_playbook
from combee_core.windows import ReadyWindow, SubgroupWindows, WindowKey
from streams.dead_letters import make_dead_letter
from streams.playbook_view import PlaybookVersions
from streams.runtime import Stage, cancel_tasks

log = logging.getLogger(__name__)

STAGE = "aggregate"


class AggregatorStage(Stage):
    name = STAGE
    consumes = ("shuffle",)
    input_model = ShuffledReflection
    input_label = "shuffled copy"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.windows = SubgroupWindows()
        self._records: dict[WindowKey, list[ConsumerRecord]] = {}
        self._partition: dict[WindowKey, TopicPartition] = {}
        self._calls: dict[WindowKey, asyncio.Task] = {}
        self.playbooks = PlaybookVersions(self) if self.settings.llm_context else None

    async def prepare(self) -> None:
        if self.playbooks is not None:
            await self.playbooks.start()

    async def context(self, playbook_id: str, base_version: int) -> str:
        """The version the batch will be applied to, rendered within the context budget ("" without context). It
        waits for that version (the previous batch's): aggregating with any other would make the prompt, and so
        the result, depend on timing."""
        if self.playbooks is None:
            return ""
        playbook = await self.playbooks.at(playbook_id, base_version, self.settings.window_timeout_s)
        return render_playbook(playbook, self.settings.llm_context_tokens).text

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        keys = [key for key, tp in self._partition.items() if tp in revoked]
        self.windows.drop(keys)
        await cancel_tasks([self._calls.pop(key) for key in keys if key in self._calls])
        for key in keys:
            self._records.pop(key, None)
            del self._partition[key]

    async def handle(self, record: ConsumerRecord, copy: ShuffledReflection) -> None:
        outcome, ready = self.windows.add(copy, time.monotonic())
        if outcome != "added":
            self.ctx.count(f"{outcome}_copies")
            self.done(record)
            return
        key = SubgroupWindows.key_of(copy)
        self._records.setdefault(key, []).append(record)
        self._partition[key] = TopicPartition(record.topic, record.partition)
        if ready is not None:
            self._launch(ready)

    async def tick(self, now: float) -> None:
        for ready in self.windows.expired(now, self.settings.window_timeout_s):
            log.warning("window %s closed by timeout with %d of %d copies", ready.key, len(ready.copies),
                        ready.expected_count)
            self._launch(ready)

    def _launch(self, ready: ReadyWindow) -> None:
        self._calls[ready.key] = self.spawn(self._aggregate(ready), name=f"aggregate-{ready.key}")

    async def _aggregate(self, ready: ReadyWindow) -> None:
        first = ready.copies[0]
        reflections = [copy.reflection for copy in ready.copies]
        distinct = {r.reflection_id: r for r in reflections}
        fields: dict[str, Any]
        fields = dict(
            playbook_id=first.playbook_id,
            batch_id=first.batch_id,
            level=0,
            node=first.subgroup,
            k=first.k,
            base_version=first.base_version,
            items_read=len(ready.copies),
            expected_items=ready.expected_count,
            missing_items=ready.missing,
            closed_by=ready.closed_by,
            batch_closed_at=first.batch_closed_at,
            max_staleness=max(max(0, first.base_version - r.seen_version) for r in reflections),
        )
        try:
            context = await self.context(first.playbook_id, first.base_version)
            result = await self.ctx.roles.aggregate(reflections, context)
            partial = PartialUpdate(
                operations=result.operations,
                reflection_ids=sorted(distinct),
                trace_ids=sorted({r.trace_id for r in reflections}),
                model=self.settings.aggregator_model,
                usage=result.usage,
                latency_s=result.latency_s,
                **fields,
            )
        except LLMError as error:
            traces = sorted({copy.reflection.trace_id for copy in ready.copies})
            await self.ctx.dead_letter(make_dead_letter(
                STAGE, f"aggregation failed for window {ready.key} ({len(traces)} traces: {', '.join(traces[:20])}): "
                f"{error}; a trace whose other copies reach the version is learned anyway, the reducer dead-letters "
                "each one that is not", error, b"", playbook_id=first.playbook_id))
            partial = PartialUpdate(operations=[], error=str(error)[:2000], model=self.settings.aggregator_model,
                                    **{**fields, "missing_items": ready.expected_count, "items_read": 0})
        await self.ctx.send("partials", partial.playbook_id, partial, wait=True)
        self.ctx.count("partials")
        self._calls.pop(ready.key, None)
        self._partition.pop(ready.key, None)
        for record in self._records.pop(ready.key, []):
            self.done(record)

    async def drain(self) -> None:
        await self.wait_background()
