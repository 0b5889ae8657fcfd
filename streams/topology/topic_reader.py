"""Reading topics outside any consumer group: the one place that does it (stage views, followers, ``combee status``,
``tail``, ``dlq``, ``read_topic``).

A :class:`TopicReader` is a consumer with no group and no commits. It knows a topic's partitions (refreshing the
client's metadata when a topic is new to it: the only call of aiokafka's private client in the code), the true end of
a partition on any broker (:meth:`TopicReader.end_offsets`, right on Tansu too), and reads from chosen offsets:
to the ends measured now (:meth:`TopicReader.read_to_end`) or for as long as its owner follows
(:meth:`TopicReader.fetch`).

    async with TopicReader(bootstrap, profile) as reader:
        records = await reader.read_to_end(await reader.partitions(topic))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.errors import CombeeError
from streams.broker.admin import close_client
from streams.broker.profile import BrokerProfile
from streams.topology.gapless_consumer import new_consumer

__all__ = ["TopicReadTimeout", "TopicReader", "TopicTail", "end_offsets", "read_topic"]


FOLLOW_WAIT_MS = 250
"""How long a follower's fetch waits for records before it returns empty (records and the stop end it sooner): an
idle view woke every 100 ms before, ~0.1 ms of CPU each, ten views a worker. Not longer: the gapless consumer's idle
back-off counts empty returns, and at 1 s a view took ~4 s after each record to back off (more fetches, each dearer
than a wake-up, in a worker that sees a record every few seconds)."""


class TopicReadTimeout(CombeeError, TimeoutError):
    """A read to the ends measured did not get there in time (a broker slow or away): one line from a command, not a
    traceback (``combee status`` gave one after a restart on ``s3://`` storage, issue 40)."""


class TopicReader:
    """A consumer outside any group: partitions, end offsets, and records from chosen offsets."""

    def __init__(self, bootstrap: str, profile: BrokerProfile, *, what: str = "a topic reader",
                 **overrides: Any) -> None:
        self.profile = profile
        self.what = what
        """Named in the warning when closing it hangs."""
        self._consumer = new_consumer(bootstrap, profile, None, **overrides)

    async def start(self) -> TopicReader:
        await self._consumer.start()
        return self

    async def stop(self) -> None:
        await close_client(self._consumer.stop(), self.what)

    async def __aenter__(self) -> TopicReader:
        try:
            return await self.start()
        except BaseException:  # a start the broker refused leaves a client to close too
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def topics(self) -> set[str]:
        """Every topic of the cluster (a full metadata fetch)."""
        return set(await self._consumer.topics())

    async def partitions(self, topic: str, *, refresh: bool = False) -> list[TopicPartition]:
        """The partitions of ``topic`` (none when it does not exist); the client's metadata is refreshed first when
        it does not know the topic yet, or when ``refresh`` (a topic whose partitions may have grown)."""
        known = None if refresh else self._consumer.partitions_for_topic(topic)
        if known is None:
            await self._consumer._client.force_metadata_update()  # aiokafka has no public refresh
            known = self._consumer.partitions_for_topic(topic)
        return [TopicPartition(topic, p) for p in sorted(known or ())]

    async def end_offsets(self, tps: Iterable[TopicPartition], *, deadline_s: float = 10.0
                          ) -> dict[TopicPartition, int]:
        """The true end offset of each partition now (see :func:`end_offsets`); it reassigns this reader."""
        return await end_offsets(self._consumer, self.profile, list(tps), deadline_s=deadline_s)

    async def assign(self, start: Mapping[TopicPartition, int | None] | Iterable[TopicPartition]) -> None:
        """Read these partitions from now on, each from its offset (None, or a plain list: from its beginning)."""
        start = dict(start) if isinstance(start, Mapping) else dict.fromkeys(start)
        self._consumer.assign(list(start))
        for tp, offset in start.items():
            if offset is None:
                await self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)

    def unassign(self) -> None:
        """Read nothing until assigned again (an idle reader kept open then fetches nothing in the background)."""
        self._consumer.unsubscribe()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._consumer.seek(tp, offset)

    async def fetch(self, *tps: TopicPartition, timeout_ms: int = 100, max_records: int | None = None
                    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """One fetch of the assigned partitions (or of ``tps``), waiting up to ``timeout_ms`` for records."""
        return dict(await self._consumer.getmany(*tps, timeout_ms=timeout_ms, max_records=max_records))

    async def follow(self, stop: asyncio.Event, *, timeout_ms: int = FOLLOW_WAIT_MS
                     ) -> AsyncIterator[list[ConsumerRecord]]:
        """The records of every fetch of the assigned partitions that brought some (each partition's in log order),
        until ``stop`` is set. Records end a wait as they arrive, and so does ``stop``: ``timeout_ms`` only paces
        the empty returns an idle reader makes (the gapless consumer's idle back-off counts them)."""
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                fetching = asyncio.ensure_future(self._consumer.getmany(timeout_ms=timeout_ms))
                await asyncio.wait((fetching, stopped), return_when=asyncio.FIRST_COMPLETED)
                if not fetching.done():  # stopped while waiting: nothing was taken from the consumer
                    fetching.cancel()
                    await asyncio.gather(fetching, return_exceptions=True)
                    return
                batch = fetching.result()
                if batch:
                    yield [record for records in batch.values() for record in records]
        finally:
            stopped.cancel()

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset each partition holds now."""
        return dict(await self._consumer.beginning_offsets(list(tps)))

    async def position(self, tp: TopicPartition) -> int:
        return int(await self._consumer.position(tp))

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end as the last fetch reported it (None before any)."""
        return self._consumer.highwater(tp)

    async def read_to_end(self, start: Mapping[TopicPartition, int | None] | Iterable[TopicPartition], *,
                          ends: Mapping[TopicPartition, int] | None = None, deadline_s: float = 30.0
                          ) -> list[ConsumerRecord]:
        """Every record of the partitions from their start offsets (None or a plain list: the beginning) up to their
        ends measured now (or ``ends``), in (partition, offset) order. Records written after the ends were measured
        are left out (a snapshot); no idle wait."""
        start = dict(start) if isinstance(start, Mapping) else dict.fromkeys(start)
        if ends is None:
            ends = await self.end_offsets(start)
        todo = {tp: offset for tp, offset in start.items() if ends.get(tp, 0) > (offset or 0)}
        records: list[ConsumerRecord] = []
        if not todo:
            return records
        await self.assign(todo)
        started = time.monotonic()
        pending = list(todo)
        while pending:
            if time.monotonic() - started > deadline_s:
                topics = sorted({tp.topic for tp in pending})
                raise TopicReadTimeout(f"reading {topics} did not reach their ends within {deadline_s} s")
            batch = await self._consumer.getmany(*pending, timeout_ms=200)
            for tp, tp_records in batch.items():
                records.extend(r for r in tp_records if r.offset < ends[tp])
            pending = [tp for tp in pending if await self._consumer.position(tp) < ends[tp]]
        records.sort(key=lambda r: (r.partition, r.offset))
        return records


async def read_topic(bootstrap: str, profile: BrokerProfile, topic: str, *, deadline_s: float = 30.0,
                     start: Mapping[int, int] | None = None) -> list[ConsumerRecord]:
    """Every record of ``topic`` to its current end (no consumer group, no commits), in (partition, offset) order;
    ``start``: partition -> offset to read from instead of the beginning (what a reader has already seen)."""
    async with TopicReader(bootstrap, profile, what=f"the reader of {topic}") as reader:
        tps = await reader.partitions(topic)
        return await reader.read_to_end({tp: (start or {}).get(tp.partition) for tp in tps}, deadline_s=deadline_s)


class TopicTail:
    """A topic read in steps, outside any group: each :meth:`read_new` returns the records written since the previous
    one (read from the last offset seen, never the whole topic again)."""

    def __init__(self, bootstrap: str, profile: BrokerProfile, topic: str) -> None:
        self.bootstrap, self.profile, self.topic = bootstrap, profile, topic
        self.next: dict[int, int] = {}
        """Partition -> the offset after the last record seen."""

    async def read_new(self, *, deadline_s: float = 30.0) -> list[ConsumerRecord]:
        records = await read_topic(self.bootstrap, self.profile, self.topic, deadline_s=deadline_s, start=self.next)
        for record in records:
            self.next[record.partition] = record.offset + 1
        return records


async def end_offsets(
    consumer: AIOKafkaConsumer, profile: BrokerProfile, tps: list[TopicPartition], *, deadline_s: float = 10.0
) -> dict[TopicPartition, int]:
    """The true end offset (high watermark) of each partition, on any broker.

    Kafka answers ListOffsets correctly. Tansu answers it with the newest *batch's* base offset + 1, which can be
    short of the end; there we seek just before that answer, fetch, and read the high watermark the fetch reports.
    The consumer must not be in a group (it is assigned ``tps`` here).
    """
    listed = await consumer.end_offsets(tps) if tps else {}
    if profile.latest_offsets_reliable or not tps:
        return dict(listed)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, max(0, listed[tp] - 1))
    result: dict[TopicPartition, int] = {tp: 0 for tp in tps if listed[tp] == 0}
    started = time.monotonic()
    while len(result) < len(tps) and time.monotonic() - started < deadline_s:
        await consumer.getmany(*[tp for tp in tps if tp not in result], timeout_ms=100)
        for tp in tps:
            highwater = consumer.highwater(tp)
            if tp not in result and highwater is not None:
                result[tp] = highwater
    for tp in tps:
        result.setdefault(tp, listed[tp])  # fall back to the listed offset rather than hang
    return result
