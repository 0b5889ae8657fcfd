"""The stage runtime: a consumer-group member that owns partitions, rebuilds their state, handles their records,
ticks and commits what is safe (``Stage``).

The Kafka clients it uses are configured in ``streams.topology.kafka_clients``; what a stage gets from its worker is
``streams.topology.stage_context.StageContext``; reading outside a group is ``streams.topology.topic_reader``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, TypeVar, cast

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord

from combee_core.models import CombeeModel, describe_error
from combee_core.partitions.ownership import PartitionOwnership
from combee_core.settings import CombeeSettings
from combee_core.topology import StageSpec, topic_spec
from streams.broker.errors import BROKER_UNANSWERED
from streams.broker.stopping import stopped_within
from streams.topology.commit_order import commit, fence
from streams.topology.gapless_consumer import new_consumer
from streams.topology.group_guard import join_wait_s, start_in_group
from streams.topology.kafka_clients import partition_for
from streams.topology.offsets import OffsetTracker
from streams.topology.stage_context import StageContext
from streams.topology.stage_records import Delivery, RecordReading
from streams.topology.start_checkpoints import StartCheckpoints
from streams.topology.views.host import View

__all__ = ["Stage", "StageFailed", "cancel_tasks"]

log = logging.getLogger(__name__)
REBUILD_RETRY_S = 1.0  # between two tries of a rebuild the broker did not answer
MIN_FETCH_WAIT_MS = 10
"""The shortest a stage's main loop waits for records when its tick is due or late (no loop spins on ticks)."""

M = TypeVar("M", bound=CombeeModel)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, stage: Stage) -> None:
        self._stage = stage

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._stage.release(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._stage.acquire(set(assigned))


async def cancel_tasks(tasks: list[asyncio.Task]) -> None:
    """Cancel work in flight (its records stay uncommitted) and wait until it has stopped."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _partitions(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(tps))


class StageFailed(RuntimeError):
    """A stage's background work raised an unexpected error; the worker stops with it."""


class Stage(RecordReading):
    """A consumer-group member running one stage: consume, handle, tick, commit what is safe.

    A binding sets ``spec`` (its declaration in ``combee_core.topology``): its ``name`` and ``consumes`` are the
    spec's, and the live views it creates must be of topics in the spec's ``reads``."""

    spec: StageSpec | None = None
    name = "stage"
    consumes: tuple[str, ...] = ()
    tick_interval_s = 0.25

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.spec is not None:
            cls.name, cls.consumes = cls.spec.name, cls.spec.consumes
            consumed = topic_spec(cls.spec.consumes[0])
            if "input_model" not in cls.__dict__:  # a binding may say None: its handle reads the raw bytes
                cls.input_model = cast("type[CombeeModel] | None", consumed.model)
            if "input_label" not in cls.__dict__:
                cls.input_label = consumed.record

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.tracker = OffsetTracker()
        self.ownership = PartitionOwnership[TopicPartition]()
        """Each partition the group gave this member, with its status (``combee_core.partitions.ownership``)."""
        self.views: list[View] = []
        """Live views (``streams.topology.views``), closed when the stage stops."""
        self.checkpoints = StartCheckpoints(self)
        """Where the views resume, read once at start."""
        self._consumer: AIOKafkaConsumer | None = None
        self.started = asyncio.Event()
        """Set once the consumer has started (joined its group); cleared when it stops."""
        self._background: set[asyncio.Task] = set()
        self._services: set[asyncio.Task] = set()
        self._failure: BaseException | None = None
        self._partition_of: dict[tuple[str, int], int] = {}
        """(key, partition count) -> the partition the key lands on: one entry per playbook seen."""

    def spawn(self, coro, name: str | None = None, *, service: bool = False) -> asyncio.Task:
        """Run ``coro`` in the background; an unexpected error in it stops this stage (and so the worker) with
        that error, instead of vanishing (its records stay uncommitted, so a restart redelivers them).

        A ``service`` (a state view) runs until the stage closes it; :meth:`wait_background` does not wait for it.
        """
        task = asyncio.create_task(coro, name=name)
        (self._services if service else self._background).add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        self._services.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        log.error("%s: background task %s failed", self.name, task.get_name())
        self._fail(error)

    async def wait_background(self) -> None:
        """Wait for every background task; raise the first unexpected error any of them died of."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        if self._failure is not None:
            raise StageFailed(f"stage {self.name} failed in a background task: {type(self._failure).__name__}: "
                              f"{self._failure}") from self._failure

    @property
    def consumer(self) -> AIOKafkaConsumer | None:
        """The group consumer while the stage runs (metrics read high watermarks and committed offsets)."""
        return self._consumer

    @property
    def settings(self) -> CombeeSettings:
        return self.ctx.settings

    async def prepare(self) -> None:
        """Rebuild state from output topics before consuming (override)."""

    def fetch_limit(self) -> int:
        """Most records handled per fetch (override: a stage whose fetch waits on LLM calls keeps it small, so a
        rebalance never throws away much work in flight)."""
        return 500

    async def handle(self, record: ConsumerRecord, value: Any) -> None:
        """One record of a partition this stage owns, with its decoded value (override)."""
        raise NotImplementedError

    async def handle_many(self, deliveries: list[Delivery]) -> None:
        """Handle the decoded records of one fetch, in order, skipping those of partitions revoked meanwhile
        (override to process them concurrently)."""
        for delivery in deliveries:
            if self.owns(delivery.partition):
                await self.handle(delivery.record, delivery.value)

    async def tick(self, now: float) -> None:
        """Periodic work: timeouts, max_wait closes (override)."""

    async def drain(self) -> None:
        """Finish in-flight work before stopping (override)."""

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Partitions assigned (by a rebalance, or again after a reset): rebuild exactly their state (override).
        Records of these partitions are handled only once this returns."""

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions taken away: stop their work in flight and drop their state (override). Their uncommitted
        records are delivered again, to whichever member owns them next."""

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        """Partitions this member owns now (ACTIVE): it handles, produces for and commits only these."""
        return self.ownership.owned

    def owns(self, tp: TopicPartition) -> bool:
        return self.ownership.owns(tp)

    def held_by_client(self) -> set[TopicPartition]:
        """Owned partitions the Kafka client still holds: in a rebalance the client drops a partition before the
        stage's release runs, and asking the client about a partition it dropped raises."""
        return set(self.ownership.owned & self._consumer.assignment()) if self._consumer is not None else set()

    def owner_partition(self, key: str) -> TopicPartition:
        """The input partition records keyed ``key`` arrive on (stages consuming one keyed topic)."""
        topic = self.settings.topic(self.consumes[0])
        count = len(self._consumer.partitions_for_topic(topic) or ()) if self._consumer is not None else 0
        count = count or self.settings.partitions
        partition = self._partition_of.get((key, count))
        if partition is None:  # murmur2 in Python (~25 us): each tick asks it of every playbook in several stages
            partition = self._partition_of[(key, count)] = partition_for(key, count)
        return TopicPartition(topic, partition)

    def owns_key(self, key: str) -> bool:
        return self.ownership.owns(self.owner_partition(key))

    def mark_stale(self, tp: TopicPartition, *, expected: bool = False) -> None:
        """This partition's state was found stale (another writer took a number first): the main loop resets it.
        ``expected``: the other writer was an operator's (``combee playbook import``), not a fault."""
        self.ownership.mark_stale(tp, expected=expected)

    async def release(self, revoked: set[TopicPartition]) -> None:
        """Fence revoked partitions: no handling, producing or committing for them from now on."""
        revoked = set(self.ownership.revoke(revoked))
        if not revoked:
            return
        try:
            await self.on_revoked(revoked)
            await fence(self, revoked)
        finally:
            self.tracker.forget(revoked)
            self.ownership.revoked(revoked)
        self.ctx.count(f"partitions_released.{self.name}", len(revoked))
        log.info("%s: released %s", self.name, _partitions(revoked))

    async def acquire(self, assigned: set[TopicPartition]) -> None:
        """Newly assigned partitions: paused until the main loop has rebuilt their state (:meth:`rebuild`). The
        rebalance callback itself stays short, so a slow rebuild never makes this member miss a rebalance."""
        waiting = self.ownership.assign(assigned)
        if waiting and self._consumer is not None:
            self._consumer.pause(*waiting)

    async def rebuild(self) -> None:
        """Rebuild the state of the partitions waiting for it, then own them and let their records in. A release
        during the rebuild voids it (partitions assigned again are queued again); a failure stops the worker."""
        if self._consumer is None or self.ctx.stop.is_set():
            return
        pending = set(self.ownership.begin_restore())
        if not pending:
            return
        try:
            for view in self.views:  # the state the new partitions need is what the logs hold now
                if view.catch_up_on_assign:
                    await view.catch_up()
            await self.on_assigned(pending)
        except BROKER_UNANSWERED as error:  # the broker is away: try again; the watchdog stops the worker after its
            # grace (exit 3) if it stays away, instead of this stage dying with a traceback at once
            self.ownership.retry_restore(self._consumer.assignment())
            log.warning("%s: could not rebuild %s, the broker did not answer (%s); trying again", self.name,
                        _partitions(pending), type(error).__name__)
            await stopped_within(self.ctx.stop, REBUILD_RETRY_S)
            return
        except Exception as error:  # a stage must not work on partitions whose state it could not rebuild
            self.ownership.abandon_restore()
            self._fail(error)
            return
        owned = self.ownership.end_restore(self._consumer.assignment())
        if not owned:  # a release meanwhile: rebuilt again, what was read may predate the release's writes
            return
        self._consumer.resume(*owned)
        self.ctx.count(f"partitions_acquired.{self.name}", len(owned))
        log.info("%s: owns %s", self.name, _partitions(owned))

    async def reset_stale(self) -> None:
        """Partitions whose state went stale: release, seek back to the committed offset, rebuild, own again."""
        stale, expected = self.ownership.take_stale()
        if not stale or self._consumer is None:
            return
        if expected:  # an import: routine, said at info level
            log.info("%s: rebuilding %s from the logs after a `combee playbook import`", self.name,
                     _partitions(stale))
        else:
            log.warning("%s: another writer took a number first on %s; rebuilding from the logs", self.name,
                        _partitions(stale))
        self.ctx.count("state_resets")
        await self.release(set(stale))
        for tp in stale & self._consumer.assignment():
            if await self._seek_committed(tp):
                await self.acquire({tp})

    async def _seek_committed(self, tp: TopicPartition) -> bool:
        """Read ``tp`` again from its committed offset; False when the client dropped it meanwhile (a rebalance
        while the commit was asked for: its release follows)."""
        assert self._consumer is not None
        committed = await self._consumer.committed(tp)
        try:
            if committed is None:
                await self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, committed)
        except IllegalStateError:
            log.info("%s: %s was taken away while its committed offset was read", self.name, _partitions({tp}))
            return False
        return True

    def _fail(self, error: BaseException) -> None:
        log.error("%s: %s", self.name, describe_error(error))
        if self._failure is None:
            self._failure = error
            self.ctx.stop.set()

    def done(self, record: ConsumerRecord) -> None:
        tp = TopicPartition(record.topic, record.partition)
        if self.ownership.owns(tp):
            self.tracker.done(tp, record.offset)

    async def commit(self) -> None:
        """Commit the safe offsets of the owned partitions (``streams.topology.commit_order``)."""
        await commit(self, set(self.ownership.owned))

    async def run(self) -> None:
        """Consume until the worker's stop event is set."""
        try:
            consumer = await self._prepare_and_join()
            self.started.set()
            log.info("%s: consuming %s", self.name, ", ".join(self.consumes))
            await self._consume(consumer)
            await self.drain()
            await self.wait_background()
            await self.commit()
        finally:
            self.started.clear()
            for task in list(self._background):  # a run that failed: its work in flight (uncommitted) ends with it
                task.cancel()
            for view in self.views:
                view.close()
            await asyncio.gather(*self._services, return_exceptions=True)
            if self._consumer is not None:
                await self._consumer.stop()
            self._consumer = None

    async def _prepare_and_join(self) -> AIOKafkaConsumer:
        """Rebuild the stage's state (:meth:`prepare`) while its consumer joins the group, and return the consumer
        once both are done. A join takes seconds whatever the stage does (Tansu holds a JoinGroup for half the
        session timeout: 3 s); partitions assigned meanwhile stay paused until the main loop has rebuilt their state
        (:meth:`acquire`, :meth:`rebuild`), so nothing is handled or committed before ``prepare`` has returned."""
        joining = asyncio.create_task(
            start_in_group(self._group_consumer, join_wait_s(self.ctx.profile), f"stage {self.name}"),
            name=f"join-{self.name}")
        try:
            await self.prepare()
            return await joining
        finally:
            if not joining.done():  # prepare failed or the stage was cancelled: the join is not wanted any more
                joining.cancel()
                await asyncio.gather(joining, return_exceptions=True)

    def _group_consumer(self) -> AIOKafkaConsumer:
        """A new consumer in the stage's group, subscribed to its input (``group_guard`` may make several)."""
        consumer = new_consumer(  # on Tansu: never steps over a record still being written (log_gaps)
            self.ctx.bootstrap, self.ctx.profile, self.settings.group(self.name))
        self._consumer = consumer
        consumer.subscribe([self.settings.topic(t) for t in self.consumes], listener=_Rebalance(self))
        return consumer

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        last_tick = 0.0
        while not self.ctx.stop.is_set():
            # records end the wait as they arrive; an idle stage wakes only for its next tick (it woke every 100 ms)
            wait_ms = max(MIN_FETCH_WAIT_MS, int(1000 * (last_tick + self.tick_interval_s - time.monotonic())))
            batch = await consumer.getmany(timeout_ms=wait_ms, max_records=self.fetch_limit())
            await self.rebuild()
            for tp, records in batch.items():
                await self.take_fetch(tp, records)
            await self.reset_stale()
            now = time.monotonic()
            if now - last_tick >= self.tick_interval_s - MIN_FETCH_WAIT_MS / 1000:  # asyncio wakes a timer a hair early
                last_tick = now
                await self.tick(now)
                await self.commit()

    async def take_fetch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        """The records of one partition in one fetch: handled if this member owns it (its state rebuilt first if
        they were fetched before its pause took effect); else left to whoever owns it."""
        if self.ownership.awaits_restore(tp):  # fetched before the pause took effect: rebuild first
            await self.rebuild()
        if not self.ownership.owns(tp):
            if self._consumer is not None and tp in self._consumer.assignment():  # still ours, state not rebuilt:
                await self._seek_committed(tp)  # start again from the commit
            return  # else revoked: the next owner reads them
        for record in records:
            self.tracker.consumed(tp, record.offset)
        self.ctx.count(f"records_in.{self.name}", len(records))
        await self.handle_many(await self.decode_fetch(records))
