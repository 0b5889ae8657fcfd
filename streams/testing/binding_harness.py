"""Drive one stage binding over in-memory topics, no broker (as faust's ``Agent.test_context()``): a unit test puts
records on the stage's input, and reads what it published, its dead letters, its counters and what it would commit.

The binding runs the runtime's own paths: it owns its partitions through ``Stage.acquire`` and ``Stage.rebuild``
(``on_assigned`` runs), a put is one fetch through ``Stage.take_fetch`` (decode, dead letters, ``handle_many``), a
revocation goes through ``Stage.release`` (``on_revoked``, the fence). What it does not run: the group join,
``prepare`` (which reads the broker) and the live views (which read topics outside the group).

Usage::

    async with BindingHarness(EvaluatorStage) as harness:
        await harness.put(request, key="pb")
        [result] = harness.values(Topic.EVAL_RESULTS, EvalResult)
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import TracebackType
from typing import Any, Generic, TypeVar

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, RecordMetadata

from combee_core.models import CombeeModel
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology.runtime import Stage
from streams.topology.stage_context import StageContext

S = TypeVar("S", bound=Stage)
M = TypeVar("M", bound=CombeeModel)


class InMemoryTopics:
    """Topics as lists of records, by full topic name (the channel the binding reads and writes)."""

    def __init__(self) -> None:
        self.records: dict[TopicPartition, list[ConsumerRecord]] = defaultdict(list)

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: tuple[tuple[str, bytes], ...] = ()) -> ConsumerRecord:
        log = self.records[TopicPartition(topic, partition)]
        record = ConsumerRecord(topic=topic, partition=partition, offset=len(log), timestamp=0, timestamp_type=0,
                                key=key, value=value, checksum=None, serialized_key_size=len(key or b""),
                                serialized_value_size=len(value or b""), headers=headers)
        log.append(record)
        return record

    def of(self, topic: str) -> list[ConsumerRecord]:
        """Every record of ``topic``, partition by partition."""
        return [record for tp in sorted(self.records) if tp.topic == topic for record in self.records[tp]]


class InMemoryContext(StageContext):
    """A stage context whose sends land in :class:`InMemoryTopics` (partition 0) and are stored at once."""

    def __init__(self, settings: CombeeSettings, topics: InMemoryTopics) -> None:
        super().__init__(settings=settings, bootstrap="in-memory", profile=BrokerProfile.for_kind("tansu"),
                         producer=None, stop=asyncio.Event())
        self.topics = topics
        self.flushes = 0

    async def send(self, topic: str, key: str, value: CombeeModel | bytes, *, wait: bool = False,
                   headers: tuple[tuple[str, bytes], ...] = ()) -> RecordMetadata | None:
        payload = value if isinstance(value, bytes) else value.to_json_bytes()
        self.count(f"records_out.{topic}")
        record = self.topics.append(self.settings.topic(topic), 0, key.encode(), payload, headers)
        if not wait:
            return None
        return RecordMetadata(topic=record.topic, partition=0, topic_partition=TopicPartition(record.topic, 0),
                              offset=record.offset, timestamp=None, timestamp_type=0, log_start_offset=0)

    async def flush(self) -> None:
        self.flushes += 1


class InMemoryClient:
    """The part of the Kafka client the runtime asks during a fetch, a rebalance and a commit."""

    def __init__(self, partitions: int) -> None:
        self.held: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()
        self.committed: dict[TopicPartition, int] = {}
        self._partitions = partitions

    def assignment(self) -> set[TopicPartition]:
        return set(self.held)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._partitions))

    def pause(self, *tps: TopicPartition) -> None:
        self.paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused -= set(tps)

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.committed.update({tp: meta.offset for tp, meta in offsets.items()})


class BindingHarness(Generic[S]):
    """One binding of ``stage_class`` owning ``owned`` partitions (of ``partitions``) of its input topic."""

    def __init__(self, stage_class: type[S], settings: CombeeSettings | None = None, *, partitions: int = 1,
                 owned: tuple[int, ...] = (0,)) -> None:
        self.settings = settings if settings is not None else CombeeSettings.load(env={})
        self.topics = InMemoryTopics()
        self.ctx = InMemoryContext(self.settings, self.topics)
        self.stage = stage_class(self.ctx)
        self.client = InMemoryClient(partitions)
        self.stage._consumer = self.client
        self.input = self.settings.topic(self.stage.consumes[0])
        self._owned = owned

    async def __aenter__(self) -> BindingHarness[S]:
        await self.assign(*self._owned)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stage.wait_background()

    async def assign(self, *partitions: int) -> None:
        """The group assigns ``partitions``; the stage rebuilds their state and owns them."""
        tps = {TopicPartition(self.input, p) for p in partitions}
        self.client.held |= tps
        await self.stage.acquire(tps)
        await self.stage.rebuild()

    async def revoke(self, *partitions: int) -> None:
        """The group takes ``partitions`` away (the client drops them first, as in a rebalance)."""
        tps = {TopicPartition(self.input, p) for p in partitions}
        self.client.held -= tps
        self.client.paused -= tps
        await self.stage.release(tps)

    async def put(self, value: CombeeModel | bytes | None, *, key: str = "", partition: int = 0) -> ConsumerRecord:
        """Append one record to the stage's input and deliver it as one fetch."""
        [record] = await self.put_many([value], key=key, partition=partition)
        return record

    async def put_many(self, values: list[Any], *, key: str = "", partition: int = 0) -> list[ConsumerRecord]:
        records = [self.topics.append(self.input, partition, key.encode(),
                                      v.to_json_bytes() if isinstance(v, CombeeModel) else v) for v in values]
        await self.stage.take_fetch(TopicPartition(self.input, partition), records)
        return records

    async def tick(self, now: float) -> None:
        """One tick of the main loop: the stage's periodic work, then a commit."""
        await self.stage.tick(now)
        await self.stage.commit()

    async def commit(self) -> dict[TopicPartition, int]:
        """Commit what is safe; the committed offsets, per partition."""
        await self.stage.commit()
        return dict(self.client.committed)

    def sent(self, topic: str) -> list[ConsumerRecord]:
        """What the stage published to a logical topic."""
        return self.topics.of(self.settings.topic(topic))

    def values(self, topic: str, model: type[M]) -> list[M]:
        return [model.from_json_bytes(record.value) for record in self.sent(topic)]
