"""The fence between a stage's numbered writes and the release of its partitions (``streams.topology.write_fence``):
a release waits for the write in flight, and a write that starts after a release finds the key not owned."""

from __future__ import annotations

import asyncio

from streams.topology.write_fence import WriteFence


async def test_a_release_waits_for_the_write_in_flight_and_a_later_write_is_not_owned():
    owned = {"pb"}
    fence = WriteFence(lambda key: key in owned)
    sending, landed = asyncio.Event(), asyncio.Event()
    events: list[str] = []

    async def write() -> None:
        async with fence.owning("pb") as mine:
            assert mine
            sending.set()
            await landed.wait()  # the send is in flight
            events.append("written")

    async def release() -> None:
        owned.discard("pb")  # the runtime drops the partition from `assigned` before `on_revoked`
        await fence.released()
        events.append("released")

    writer = asyncio.create_task(write())
    await sending.wait()
    releaser = asyncio.create_task(release())
    await asyncio.sleep(0.01)
    assert events == [] and not releaser.done()  # the release waits for the write
    landed.set()
    await asyncio.gather(writer, releaser)
    assert events == ["written", "released"]

    async with fence.owning("pb") as mine:  # a decision computed before the release is not written after it
        assert not mine


async def test_a_release_with_no_write_in_flight_returns_at_once():
    fence = WriteFence(lambda key: True)
    await asyncio.wait_for(fence.released(), 1)
    async with fence.owning("pb") as mine:
        assert mine
