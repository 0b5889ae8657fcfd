"""The stage runtime's side of a rebalance, driven without a broker (a stand-in for the client's assignment and
pauses): new partitions are paused until their state is rebuilt, a release during a rebuild voids it, a revoked
partition is fenced before its state is dropped (docs/architecture.md, "Scaling out: who owns what")."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka import TopicPartition

from combee_core.partitions.ownership import PartitionStatus
from streams.topology.runtime import Stage

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


class ClientStandIn:
    """What the runtime asks of the Kafka client during a rebalance."""

    def __init__(self) -> None:
        self.held: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.held)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused -= set(tps)

    async def commit(self, offsets: object) -> None:
        pass


class RebuildingStage(Stage):
    name = "rebuilding"

    def __init__(self) -> None:
        events: list[str] = []

        async def flush() -> None:
            events.append("flush")

        super().__init__(SimpleNamespace(stop=asyncio.Event(), count=lambda *_: None, flush=flush))  # type: ignore[arg-type]
        self.events = events
        self.rebuilt: list[set[TopicPartition]] = []
        self.hold_rebuild: asyncio.Event | None = None
        self.client = ClientStandIn()
        self._consumer = self.client  # type: ignore[assignment]

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.rebuilt.append(set(assigned))
        if self.hold_rebuild is not None:
            await self.hold_rebuild.wait()

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(f"dropped {sorted(tp.partition for tp in revoked)}")

    async def assign(self, *tps: TopicPartition) -> None:  # as the client does before calling the listener
        self.client.held |= set(tps)
        await self.acquire(set(tps))

    async def revoke(self, *tps: TopicPartition) -> None:
        self.client.held -= set(tps)
        self.client.paused -= set(tps)
        await self.release(set(tps))


async def test_assigned_partitions_are_paused_until_their_state_is_rebuilt():
    stage = RebuildingStage()
    await stage.assign(TP0, TP1)
    assert stage.client.paused == {TP0, TP1} and not stage.owns(TP0)
    assert stage.ownership.status(TP0) is PartitionStatus.ASSIGNED
    await stage.rebuild()
    assert stage.rebuilt == [{TP0, TP1}]
    assert stage.assigned == {TP0, TP1} and stage.client.paused == set()


async def test_a_release_during_a_rebuild_voids_it_and_the_partitions_still_held_are_rebuilt_again():
    stage = RebuildingStage()
    await stage.assign(TP0, TP1)
    await stage.rebuild()
    await stage.assign(TP0)  # not a change: owned stays owned
    await stage.revoke(TP1)
    await stage.assign(TP1)
    stage.hold_rebuild = asyncio.Event()
    rebuilding = asyncio.create_task(stage.rebuild())
    await asyncio.sleep(0)
    assert stage.ownership.status(TP1) is PartitionStatus.RESTORING
    await stage.revoke(TP0)  # a rebalance while the state is read: the rebuild may predate the next owner's writes
    stage.hold_rebuild.set()
    await rebuilding
    assert not stage.owns(TP1) and TP1 in stage.client.paused
    await stage.rebuild()
    assert stage.rebuilt == [{TP0, TP1}, {TP1}, {TP1}]
    assert stage.assigned == {TP1} and stage.client.paused == set()


async def test_a_revoked_partition_is_fenced_before_its_state_is_dropped_and_its_stale_mark_goes_with_it():
    stage = RebuildingStage()
    await stage.assign(TP0)
    await stage.rebuild()
    stage.mark_stale(TP0)
    await stage.revoke(TP0)
    assert stage.events == ["dropped [0]", "flush"]
    assert stage.ownership.status(TP0) is None
    assert stage.ownership.take_stale() == (frozenset(), False)
