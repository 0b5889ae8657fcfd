"""Fetches worked on at once finish in the order they were taken, with at most ``limit()`` records in flight."""

from __future__ import annotations

import asyncio

import pytest

from streams.topology.ordered_fetches import OrderedFetches


class Spawner:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task] = []

    def spawn(self, coro, name=None):
        task = asyncio.create_task(coro, name=name)
        self.tasks.append(task)
        return task


async def _answer(gate: asyncio.Event, value: str) -> str:
    await gate.wait()
    return value


async def test_a_later_fetch_answered_first_is_finished_after_the_one_before_it():
    spawner, finished = Spawner(), []
    fetches = OrderedFetches(spawner, lambda: 100)
    gates = [asyncio.Event() for _ in range(3)]

    async def finish(value: str, latest: bool) -> None:
        finished.append(value)
        latests.append(latest)

    latests: list[bool] = []
    for number, gate in enumerate(gates):
        await fetches.submit(2, _answer(gate, f"fetch {number}"), finish)
    assert fetches.in_flight == 6  # submit returned at once: the consume loop goes on fetching
    gates[2].set()
    gates[1].set()
    await asyncio.sleep(0.01)
    assert finished == []  # fetch 0 is not answered yet
    gates[0].set()
    await fetches.wait()
    assert finished == ["fetch 0", "fetch 1", "fetch 2"]
    assert latests == [False, False, True]  # only the last fetch had none taken after it
    assert fetches.in_flight == 0


async def test_beyond_the_limit_submit_waits_for_the_oldest_fetch():
    spawner, finished = Spawner(), []
    fetches = OrderedFetches(spawner, lambda: 4)
    gates = [asyncio.Event() for _ in range(3)]

    async def finish(value: str, latest: bool) -> None:
        finished.append(value)

    await fetches.submit(3, _answer(gates[0], "a"), finish)
    assert fetches.room() == 1
    await fetches.submit(1, _answer(gates[1], "b"), finish)
    assert fetches.room() == 1  # never 0: a fetch of one record waits for room in submit
    third = asyncio.create_task(fetches.submit(1, _answer(gates[2], "c"), finish))
    await asyncio.sleep(0.01)
    assert not third.done()  # 5 in flight > 4: waits for the oldest
    gates[0].set()
    await asyncio.wait_for(third, 1)
    assert finished == ["a"]
    gates[1].set()
    gates[2].set()
    await fetches.wait()
    assert finished == ["a", "b", "c"]


async def test_a_failing_fetch_does_not_stop_the_next_one_from_finishing():
    spawner, finished = Spawner(), []
    fetches = OrderedFetches(spawner, lambda: 10)

    async def broken() -> str:
        raise RuntimeError("the role broke")

    async def finish(value: str, latest: bool) -> None:
        finished.append(value)

    await fetches.submit(1, broken(), finish)
    await fetches.submit(1, asyncio.sleep(0, "next"), finish)
    await fetches.wait()
    assert finished == ["next"]
    with pytest.raises(RuntimeError, match="the role broke"):
        spawner.tasks[0].result()
    assert fetches.in_flight == 0
