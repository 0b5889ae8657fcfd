"""A stage's background work: an unexpected error stops the stage loudly instead of vanishing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from streams.topology.runtime import Stage, StageFailed


def _stage() -> Stage:
    return Stage(SimpleNamespace(stop=asyncio.Event()))


async def test_an_unexpected_error_in_background_work_stops_the_stage_and_is_raised():
    stage = _stage()

    async def broken() -> None:
        raise KeyError("window state lost")

    stage.spawn(broken(), name="aggregate-x")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stage.ctx.stop.is_set()
    with pytest.raises(StageFailed, match="KeyError") as raised:
        await stage.wait_background()
    assert isinstance(raised.value.__cause__, KeyError)


async def test_background_work_that_succeeds_is_awaited_and_does_not_stop_anything():
    stage = _stage()
    finished = []

    async def work(n: int) -> None:
        await asyncio.sleep(0.01 * n)
        finished.append(n)

    for n in range(3):
        stage.spawn(work(n))
    await stage.wait_background()
    assert sorted(finished) == [0, 1, 2]
    assert not stage.ctx.stop.is_set()


async def test_partitions_the_client_dropped_before_the_release_are_not_asked_about():
    """In a rebalance the Kafka client drops a partition before the stage's release runs; asking the client about
    it then raises (``Partition is not assigned``), which once stopped a worker mid-stream."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    stage = _stage()
    kept, dropped = TopicPartition("t", 0), TopicPartition("t", 1)
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")  # never started: no broker needed
    consumer.assign([kept])
    stage._consumer = consumer
    stage.assigned = {kept, dropped}
    with pytest.raises(AssertionError, match="not assigned"):
        consumer.highwater(dropped)
    assert stage.held_by_client() == {kept}
    assert [consumer.highwater(tp) for tp in stage.held_by_client()] == [None]
    await consumer.stop()
