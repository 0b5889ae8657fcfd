"""A live view of a single-partition state topic: every record, in log order, from the beginning, outside any group.

Stages keep their state as a view of the logs they (and their predecessors as owners) write: the batcher of
``batches``, the reducer of ``playbook``. The view lets its owner wait until a given offset has been applied (to
confirm that a record it wrote is the first of its number) or until the topic's current end has (on assignment).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from streams.runtime import Stage, consumer_config, end_offsets

log = logging.getLogger(__name__)

VIEW_FETCH_WAIT_MS = 50
"""Long-poll wait of the view's fetches: bounds how long a confirmation waits for a record that is already written."""


class LogViewTimeout(TimeoutError):
    """The view did not reach an offset in time (broker slow or gone)."""


class LogView:
    """Applies every record of ``topic`` (partition 0) to ``apply``, in order, until closed."""

    def __init__(self, stage: Stage, topic: str, apply: Callable[[ConsumerRecord], None]) -> None:
        self._stage = stage
        self.topic = topic
        self._apply = apply
        self._tp = TopicPartition(topic, 0)
        self.position = 0
        """Offset of the next record to apply."""
        self._advanced = asyncio.Condition()
        self._closed = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        ctx = self._stage.ctx
        self._consumer = AIOKafkaConsumer(
            **consumer_config(ctx.bootstrap, ctx.profile, None), fetch_max_wait_ms=VIEW_FETCH_WAIT_MS
        )
        await self._consumer.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)
        self._stage.spawn(self._follow(), name=f"{self._stage.name}-view-{self.topic}", service=True)
        self._stage.views.append(self)

    async def _follow(self) -> None:
        assert self._consumer is not None
        try:
            while not self._closed.is_set():
                batch = await self._consumer.getmany(self._tp, timeout_ms=100)
                records = batch.get(self._tp, [])
                for record in records:
                    self._apply(record)
                    self.position = record.offset + 1
                if records:
                    async with self._advanced:
                        self._advanced.notify_all()
        finally:
            await self._consumer.stop()

    def close(self) -> None:
        self._closed.set()

    async def reached(self, offset: int, timeout_s: float = 30.0) -> None:
        """Wait until the record at ``offset`` (and every one before it) has been applied."""
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.position > offset), timeout_s)
            except asyncio.TimeoutError as error:
                raise LogViewTimeout(f"{self.topic}: view at offset {self.position}, did not reach {offset} within "
                                     f"{timeout_s:.0f} s") from error

    async def catch_up(self, timeout_s: float = 30.0) -> None:
        """Wait until every record written before this call has been applied."""
        if self._closed.is_set():
            raise LogViewTimeout(f"{self.topic}: the view is closed")
        ctx = self._stage.ctx
        probe = AIOKafkaConsumer(**consumer_config(ctx.bootstrap, ctx.profile, None))
        await probe.start()
        try:
            end = (await asyncio.wait_for(end_offsets(probe, ctx.profile, [self._tp]), timeout_s))[self._tp]
        finally:
            await probe.stop()
        if end > 0:
            await self.reached(end - 1, timeout_s)
