"""Windowed aggregators: one window per (playbook, batch, subgroup); one LLM call per complete window.

A window completes at its expected count of copies; after ``window_timeout_s`` it closes with what it has and the
partial says how many copies were missing. Redelivered and late copies never change a result.

On revocation the windows of the revoked partitions are dropped and their calls in flight cancelled: their copies
are uncommitted, so the next owner forms the same windows again.

The decisions (which copies a window takes, when it is ready, the partial it publishes) are
``combee_core.aggregate.processor``'s; this stage launches a call per ready window and performs the effects.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.aggregate.processor import Aggregator, AggregatorConfig
from combee_core.aggregate.windows import ReadyWindow, SubgroupWindows, WindowKey
from combee_core.models import ShuffledReflection
from combee_core.playbook import render_playbook
from combee_core.topology import AGGREGATE
from streams.topology.effects import perform
from streams.topology.playbook_view import PlaybookVersions
from streams.topology.runtime import Stage, cancel_tasks

log = logging.getLogger(__name__)


class AggregatorStage(Stage):
    spec = AGGREGATE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.aggregator = Aggregator(AggregatorConfig(model=self.settings.aggregator_model,
                                                      window_timeout_s=self.settings.window_timeout_s))
        self._partition: dict[WindowKey, TopicPartition] = {}
        self._calls: dict[WindowKey, asyncio.Task] = {}
        self.playbooks = PlaybookVersions(self) if self.settings.llm_context else None

    @property
    def windows(self) -> SubgroupWindows:
        return self.aggregator.windows

    async def prepare(self) -> None:
        if self.playbooks is not None:
            await self.playbooks.start()

    async def context(self, playbook_id: str, version: int) -> str:
        """The version the batch's copies name (``combee_core.aggregate.processor.context_version``: with the
        default context lag 1, the one before the version it will be applied to), rendered within the context budget
        ("" without context). It waits for that version however long the versions before it take, since aggregating
        with any other would make the prompt, and so the result, depend on timing (with chain pacing and lag 1 it is
        a version when the batch closes, ``combee_core.batch.chain_pacing``, so this waits only for the view to read
        it). A warning every ``window_timeout_s`` says it still waits."""
        if self.playbooks is None:
            return ""
        playbook = await self.playbooks.at(playbook_id, version, None, warn_every_s=self.settings.window_timeout_s)
        return render_playbook(playbook, self.settings.llm_context_tokens).text

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        keys = [key for key, tp in self._partition.items() if tp in revoked]
        self.aggregator.drop(keys)
        await cancel_tasks([self._calls.pop(key) for key in keys if key in self._calls])
        for key in keys:  # popped: a call cancelled above may have dropped its key already
            self._partition.pop(key, None)

    async def handle(self, record: ConsumerRecord, copy: ShuffledReflection) -> None:
        effects, ready = self.aggregator.take(copy, record, time.monotonic())
        if effects:
            await perform(self, effects)
            return
        self._partition[SubgroupWindows.key_of(copy)] = TopicPartition(record.topic, record.partition)
        if ready is not None:
            self._launch(ready)

    async def tick(self, now: float) -> None:
        for ready in self.aggregator.expired(now):
            self._launch(ready)

    def _launch(self, ready: ReadyWindow) -> None:
        self._calls[ready.key] = self.spawn(self._aggregate(ready), name=f"aggregate-{ready.key}")

    async def _aggregate(self, ready: ReadyWindow) -> None:
        effects = await self.aggregator.aggregate(ready, self.ctx.roles.aggregate, self.context)
        await perform(self, effects)
        self._calls.pop(ready.key, None)
        self._partition.pop(ready.key, None)

    async def drain(self) -> None:
        await self.wait_background()
