"""A consumer that never steps over a record Tansu is still writing (``combee_core.log_order``).

A fetch whose records skip an offset is cut at the hole, the consumer seeks back to it and the next fetch reads it
again, until the record arrives or the hole has stayed open ``GAP_PATIENCE_S`` (then it reads on, with one warning
line per hole). Its fetch wait backs off while it is idle (``combee_core.partitions.fetch_wait``, up to
``idle_fetch_max_wait_ms``; none: no back-off). Its stop leaves its group at every generation
(``streams.broker.group_leave``: aiokafka's does not at Tansu's first). The pipeline's consumers are made by
``streams.topology.gapless_consumer.new_consumer`` (this class on Tansu, aiokafka's own on Kafka);
``combee_client``'s follower builds one the same way (this module imports nothing of the pipeline).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.log_order import OffsetGaps
from combee_core.partitions.fetch_wait import IdleFetchWait
from streams.broker.group_leave import leave_on_stop

__all__ = ["GaplessConsumer"]

log = logging.getLogger(__name__)


class _ForgetOnRebalance(ConsumerRebalanceListener):
    """The owner's listener, after forgetting the positions of the partitions that moved."""

    def __init__(self, gaps: OffsetGaps[TopicPartition], inner: ConsumerRebalanceListener | None) -> None:
        self._gaps = gaps
        self._inner = inner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        revoked = list(revoked)
        for tp in revoked:
            self._gaps.forget(tp)
        if self._inner is not None:
            await self._inner.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        assigned = list(assigned)
        for tp in assigned:
            self._gaps.forget(tp)
        if self._inner is not None:
            await self._inner.on_partitions_assigned(assigned)


class GaplessConsumer(AIOKafkaConsumer):
    """:class:`aiokafka.AIOKafkaConsumer` whose fetches stop at a hole in the offsets and read it again, and whose
    fetch wait lengthens while its fetches come back empty, up to ``idle_fetch_max_wait_ms`` (none: no back-off)."""

    def __init__(self, *args: Any, gaps: OffsetGaps[TopicPartition] | None = None,
                 idle_fetch_max_wait_ms: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gaps: OffsetGaps[TopicPartition] = gaps if gaps is not None else OffsetGaps()
        floor_ms = int(kwargs.get("fetch_max_wait_ms", 500))
        self.fetch_wait = IdleFetchWait(floor_ms, idle_fetch_max_wait_ms if idle_fetch_max_wait_ms else floor_ms)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        fetched = await super().getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)
        now, wall_ms = time.monotonic(), time.time() * 1000
        wait_ms = self.fetch_wait.observe(bool(fetched), now)
        if self._fetcher is not None:  # aiokafka's fetcher reads it for each fetch request it builds
            self._fetcher._fetch_max_wait_ms = wait_ms
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, records in fetched.items():
            admitted = self.gaps.admit(tp, [record.offset for record in records], now,
                                       [max(0.0, (wall_ms - record.timestamp) / 1000) for record in records])
            if admitted.seek_to is not None:
                super().seek(tp, admitted.seek_to)
            if admitted.gave_up is not None:
                log.log(logging.WARNING if admitted.waited else logging.INFO,
                        "%s[%d]: offsets %d to %d are missing (%s); reading on", tp.topic, tp.partition,
                        admitted.gave_up[0], admitted.gave_up[1] - 1,
                        f"still not written after {self.gaps.patience_s:.0f} s" if admitted.waited else
                        "the next record is older than a write in progress: deleted or never written")
            if admitted.take:
                result[tp] = records[:admitted.take]
        return result

    async def stop(self) -> None:
        leave_on_stop(self)  # a member of Tansu's first generation (0) leaves its group too
        await super().stop()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        super().seek(partition, offset)
        self.gaps.expect(partition, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> bool:
        self._forget(partitions)
        return bool(await super().seek_to_beginning(*partitions))

    async def seek_to_end(self, *partitions: TopicPartition) -> bool:
        self._forget(partitions)
        return bool(await super().seek_to_end(*partitions))

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        self._forget(partitions)
        return dict(await super().seek_to_committed(*partitions))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(partitions)
        self._forget(partitions)
        super().assign(partitions)

    def subscribe(self, topics: Any = (), pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        super().subscribe(topics, pattern=pattern, listener=_ForgetOnRebalance(self.gaps, listener))

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions or list(self.assignment()):
            self.gaps.forget(tp)
