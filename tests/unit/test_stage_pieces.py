"""Two runtime pieces the stateful stages bind, driven without a broker: one background task per key
(``streams.topology.key_tasks``) and what the batcher knows of each input partition
(``streams.topology.input_partitions``)."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord

from combee_core.batch.batching import UPSTREAM_DRAINED
from streams.topology.input_partitions import InputPartitions
from streams.topology.key_tasks import KeyTasks

TP0, TP1 = TopicPartition("reflections", 0), TopicPartition("reflections", 1)


class Spawner:
    """The part of a ``Stage`` the pieces use: ``spawn``, the consumer, the partitions its client holds."""

    def __init__(self, consumer: object | None = None, held: set[TopicPartition] | None = None) -> None:
        self.consumer = consumer
        self.held = held or set()
        self.spawned: list[str] = []

    def spawn(self, coro, name: str | None = None) -> asyncio.Task:
        self.spawned.append(name or "")
        return asyncio.create_task(coro, name=name)

    def held_by_client(self) -> set[TopicPartition]:
        return self.held


async def test_a_key_runs_one_task_at_a_time_and_a_cancelled_key_stops():
    gate = asyncio.Event()
    runs: list[str] = []

    async def work(key: str) -> None:
        runs.append(key)
        await gate.wait()

    stage = Spawner()
    tasks = KeyTasks(stage, work, "reduce")  # type: ignore[arg-type]
    tasks.kick("pb")
    tasks.kick("pb")  # running: not started twice
    tasks.kick("other")
    await asyncio.sleep(0)
    assert stage.spawned == ["reduce-pb", "reduce-other"] and tasks.keys() == {"pb", "other"}
    await tasks.cancel(["pb", "unknown"])
    assert tasks.keys() == {"other"}
    gate.set()
    await asyncio.sleep(0)
    tasks.kick("other")  # done: started again
    await asyncio.sleep(0)
    assert runs == ["pb", "other", "other"]
    await tasks.cancel(["other"])


class Consumer:
    def __init__(self, ends: dict[TopicPartition, int]) -> None:
        self.ends = ends
        self.positions: dict[TopicPartition, int] = {}
        self.dropped: set[TopicPartition] = set()

    def highwater(self, tp: TopicPartition) -> int:
        return self.ends[tp]

    async def position(self, tp: TopicPartition) -> int:
        if tp in self.dropped:
            raise IllegalStateError("not assigned")
        return self.positions.get(tp, 0)


def _record(partition: int, drained: bool) -> ConsumerRecord:
    headers = [(UPSTREAM_DRAINED, b"1")] if drained else []
    return ConsumerRecord("reflections", partition, 0, 0, 0, None, b"{}", None, 0, 0, headers)


async def test_a_partition_is_redelivered_once_read_past_its_end_at_assignment_and_reported_once():
    consumer = Consumer({TP0: 5, TP1: 3})
    partitions = InputPartitions(Spawner(consumer, {TP0, TP1}))  # type: ignore[arg-type]
    partitions.assigned({TP0, TP1})
    assert await partitions.redelivered() == set()  # the first look notes the ends
    consumer.positions = {TP0: 4, TP1: 3}
    consumer.dropped = set()
    assert await partitions.redelivered() == {TP1}
    consumer.dropped = {TP0}  # dropped by the client while asking: left to its release
    consumer.positions[TP0] = 5
    assert await partitions.redelivered() == set()
    consumer.dropped = set()
    assert await partitions.redelivered() == {TP0}
    assert await partitions.redelivered() == set()


async def test_the_latest_reflection_of_a_partition_says_whether_it_is_drained_until_it_is_revoked():
    partitions = InputPartitions(Spawner())  # type: ignore[arg-type]
    partitions.took(_record(0, drained=True))
    partitions.took(_record(1, drained=True))
    partitions.took(_record(1, drained=False))
    assert partitions.drained() == {TP0}
    partitions.revoked({TP0})
    assert partitions.drained() == set()
    assert await partitions.redelivered() == set()  # no consumer: nothing to compare
