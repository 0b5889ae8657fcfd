"""An idle worker wakes only when it has something to do: a stage's loop waits for records until its next tick, a
view's follow until records or its stop, and the partition a playbook lands on is computed once per stage
(streams/topology/runtime.py, streams/topology/topic_reader.py; figures in docs/benchmarks.md "Idle worker")."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streams.broker.profile import BrokerProfile
from streams.topology import runtime
from streams.topology.kafka_clients import partition_for
from streams.topology.runtime import Stage
from streams.topology.topic_reader import FOLLOW_WAIT_MS, TopicReader


class IdleConsumer:
    """A consumer with nothing to read: each getmany waits its whole timeout; the timeouts asked are kept."""

    def __init__(self, records_at: float | None = None) -> None:
        self.timeouts: list[int] = []
        self.records_at = records_at

    async def getmany(self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        self.timeouts.append(timeout_ms)
        if self.records_at is not None and time.monotonic() >= self.records_at:
            self.records_at = None
            return {"tp": [SimpleNamespace(offset=0)]}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    async def stop(self) -> None:
        pass


async def test_an_idle_stage_waits_for_records_until_its_next_tick_and_still_ticks_on_time() -> None:
    ticks: list[float] = []

    class Ticking(Stage):
        tick_interval_s = 0.2

        async def tick(self, now: float) -> None:
            ticks.append(now)

    stage = Ticking(SimpleNamespace(stop=asyncio.Event()))
    consumer = IdleConsumer()
    stage._consumer = consumer  # type: ignore[assignment]
    loop = asyncio.create_task(stage._consume(consumer))  # type: ignore[arg-type]
    await asyncio.sleep(1.05)
    stage.ctx.stop.set()
    await asyncio.wait_for(loop, 1)
    assert 3 <= len(ticks) <= 7, ticks  # one every 0.2 s (fewer when the machine is loaded)
    assert len(consumer.timeouts) <= len(ticks) + 2, consumer.timeouts  # one wait per tick, not one per 100 ms
    assert all(runtime.MIN_FETCH_WAIT_MS <= t <= 200 for t in consumer.timeouts), consumer.timeouts


def _reader(consumer: IdleConsumer) -> TopicReader:
    reader = TopicReader("127.0.0.1:9", BrokerProfile.for_kafka())  # never started: no broker needed
    reader._consumer = consumer  # type: ignore[assignment]
    return reader


async def test_an_idle_follow_wakes_once_per_wait_and_ends_as_soon_as_it_is_stopped() -> None:
    consumer, stop = IdleConsumer(), asyncio.Event()
    reader = _reader(consumer)

    async def follow() -> None:
        async for _ in reader.follow(stop):
            raise AssertionError("nothing to read")

    following = asyncio.create_task(follow())
    await asyncio.sleep(0.6)
    stopped_at = time.monotonic()
    stop.set()
    await asyncio.wait_for(following, 5)
    assert time.monotonic() - stopped_at < 0.1  # not after the rest of its wait
    assert FOLLOW_WAIT_MS >= 250 and consumer.timeouts == [FOLLOW_WAIT_MS] * len(consumer.timeouts)
    assert 1 <= len(consumer.timeouts) <= 3, consumer.timeouts  # one wake-up per wait, not one per 100 ms


async def test_a_follow_yields_records_as_they_arrive_whatever_its_wait() -> None:
    consumer, stop = IdleConsumer(records_at=time.monotonic()), asyncio.Event()
    got = []
    async for records in _reader(consumer).follow(stop):
        got.append(records)
        stop.set()
    assert [[r.offset for r in records] for records in got] == [[0]]


@given(keys=st.lists(st.text(min_size=1, max_size=30), max_size=30), counts=st.lists(st.integers(1, 16), min_size=1,
                                                                                        max_size=3))
def test_the_remembered_partition_of_a_key_is_the_partitioners(keys: list[str], counts: list[int]) -> None:
    stage = Stage(SimpleNamespace(stop=None))
    stage.consumes = ("traces",)
    for count in counts:  # the partition count of the input topic may grow: keyed by it too
        stage.ctx.settings = SimpleNamespace(topic=lambda t: f"x.{t}", partitions=count)
        for key in keys + keys:
            assert stage.owner_partition(key).partition == partition_for(key, count)


def test_a_stage_computes_a_keys_partition_once(monkeypatch) -> None:
    """Each tick of the batcher, reducer, guard and promoter asks it of every playbook: murmur2 in Python, ~25 us."""
    computed: list[str] = []
    monkeypatch.setattr(runtime, "partition_for", lambda key, count: computed.append(key) or partition_for(key, count))
    stage = Stage(SimpleNamespace(stop=None, settings=SimpleNamespace(topic=lambda t: f"x.{t}", partitions=4)))
    stage.consumes = ("traces",)
    for _ in range(100):  # a hundred ticks
        assert [stage.owns_key(pb) for pb in ("pb1", "pb2")] == [False, False]
    assert computed == ["pb1", "pb2"]
