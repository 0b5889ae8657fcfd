"""What the batcher knows of each reflections partition it owns, apart from its decisions: whether the reflector said
it had nothing left to reflect there (``UPSTREAM_DRAINED`` on the latest reflection), and whether a newly owned
partition has been read past the end it had at assignment (then every batch of it not fully redelivered was
confirmed before, ``Batcher.confirm``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord

from combee_core.batch.batching import UPSTREAM_DRAINED

if TYPE_CHECKING:
    from streams.topology.runtime import Stage


def upstream_drained(record: ConsumerRecord) -> bool:
    """Did the reflector publish this reflection with no trace of its partition left to reflect?"""
    return any(key == UPSTREAM_DRAINED for key, _ in record.headers or ())


class InputPartitions:
    """Per owned input partition of ``stage``: the drained flag of its latest record and its end at assignment."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self._redelivery_end: dict[TopicPartition, int | None] = {}
        self._drained: dict[TopicPartition, bool] = {}

    def assigned(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._redelivery_end[tp] = None

    def revoked(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._redelivery_end.pop(tp, None)
            self._drained.pop(tp, None)

    def took(self, record: ConsumerRecord) -> None:
        self._drained[TopicPartition(record.topic, record.partition)] = upstream_drained(record)

    def drained(self) -> set[TopicPartition]:
        """The partitions whose latest reflection said the reflector had nothing left to reflect."""
        return {tp for tp, flag in self._drained.items() if flag}

    async def redelivered(self) -> set[TopicPartition]:
        """The newly owned partitions read past their end at assignment since the last call (each reported once):
        the first call after assignment notes the end, a later one compares the position with it."""
        consumer = self.stage.consumer
        if consumer is None:
            return set()
        held = self.stage.held_by_client()
        done: set[TopicPartition] = set()
        for tp, end in list(self._redelivery_end.items()):
            if tp not in held:
                continue
            if end is None:
                self._redelivery_end[tp] = consumer.highwater(tp)
                continue
            try:
                if await consumer.position(tp) < end:
                    continue
            except IllegalStateError:  # dropped by the client while asking: the release follows
                continue
            del self._redelivery_end[tp]
            done.add(tp)
        return done
