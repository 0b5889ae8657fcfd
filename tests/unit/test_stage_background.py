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
    stage.ownership.assign({kept, dropped})
    stage.ownership.begin_restore()
    stage.ownership.end_restore({kept, dropped})  # owned: the client then dropped one, its release not run yet
    with pytest.raises(AssertionError, match="not assigned"):
        consumer.highwater(dropped)
    assert stage.held_by_client() == {kept}
    assert [consumer.highwater(tp) for tp in stage.held_by_client()] == [None]
    await consumer.stop()


async def test_a_stage_joins_its_group_while_it_rebuilds_its_state_and_is_started_only_after_both(monkeypatch):
    """A group join takes seconds whatever the stage does (3 s on Tansu): it runs while ``prepare`` rebuilds the
    stage's state instead of after it (issue 43: a worker ready within 5 s), and the stage counts as started (joined,
    state rebuilt) only once both are done."""
    from streams.topology import runtime

    joining = asyncio.Event()

    class Consumer:
        async def start(self) -> None:
            joining.set()

        async def stop(self) -> None:
            pass

    class Rebuilding(Stage):
        async def prepare(self) -> None:
            await asyncio.wait_for(joining.wait(), 5)  # the join has begun while the state is being rebuilt
            assert not self.started.is_set()

    stage = Rebuilding(SimpleNamespace(stop=asyncio.Event(), profile=None))
    monkeypatch.setattr(stage, "_group_consumer", Consumer)
    monkeypatch.setattr(runtime, "join_wait_s", lambda profile: 60.0)
    assert isinstance(await stage._prepare_and_join(), Consumer)
