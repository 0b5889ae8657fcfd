"""What every stage shares: Kafka clients configured for the broker, sending models, the consume loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord, RecordMetadata
from pydantic import ValidationError

from combee_core.models import CombeeModel, DeadLetter
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import FETCH_MAX_BYTES, MAX_REQUEST_BYTES, BrokerProfile
from streams.topology.dead_letters import make_dead_letter
from streams.topology.offsets import OffsetTracker

if TYPE_CHECKING:
    from combee_core.llm.roles import LLMRoles

log = logging.getLogger(__name__)

M = TypeVar("M", bound=CombeeModel)


@dataclass
class StageContext:
    """Everything a stage needs from its worker: settings, broker, one shared producer, the LLM roles."""

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    producer: AIOKafkaProducer
    stop: asyncio.Event
    llm: LLMRoles | None = None
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def roles(self) -> LLMRoles:
        """The LLM roles, which the worker builds for the stages that call the LLM (reflect, aggregate, reduce)."""
        if self.llm is None:
            raise RuntimeError("this worker has no LLM roles: only the reflect, aggregate and reduce stages get them")
        return self.llm

    def count(self, name: str, amount: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + amount

    async def send(
        self, topic: str, key: str, value: CombeeModel | bytes, *, wait: bool = False
    ) -> RecordMetadata | None:
        """Send a model to a logical topic (name without prefix). ``wait`` blocks until the broker acks and returns
        where the record landed."""
        payload = value if isinstance(value, bytes) else value.to_json_bytes()
        full_topic = self.settings.topic(topic)
        self.count(f"records_out.{topic}")
        if wait:
            return await self.producer.send_and_wait(full_topic, payload, key=key.encode())
        await self.producer.send(full_topic, payload, key=key.encode())
        return None

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Publish a dead letter (always waits: a dead letter must never be lost)."""
        self.count("dead_letters")
        self.count(f"dead_letters.{letter.stage}.{letter.error_type}")
        log.warning("dead letter from %s: %s", letter.stage, letter.reason)
        await self.send(Topic.DLQ, letter.stage, letter, wait=True)


def producer_config(bootstrap: str, profile: BrokerProfile) -> dict[str, Any]:
    """aiokafka producer settings for this broker (no idempotence: the embedded broker cannot do it)."""
    return dict(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        max_request_size=MAX_REQUEST_BYTES,
        linger_ms=5,
        request_timeout_ms=30_000,
    )


def consumer_config(bootstrap: str, profile: BrokerProfile, group_id: str | None) -> dict[str, Any]:
    """aiokafka consumer settings: manual commits, earliest reset, large fetches for big messages."""
    return dict(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=profile.session_timeout_ms,
        heartbeat_interval_ms=profile.heartbeat_interval_ms,
        rebalance_timeout_ms=profile.rebalance_timeout_ms,
        max_partition_fetch_bytes=FETCH_MAX_BYTES,
        fetch_max_bytes=FETCH_MAX_BYTES,
        max_poll_interval_ms=600_000,
    )


async def start_producer(bootstrap: str, profile: BrokerProfile) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(**producer_config(bootstrap, profile))
    await producer.start()
    return producer


async def read_topic(
    bootstrap: str, profile: BrokerProfile, topic: str, *, idle_s: float = 0.5, deadline_s: float = 30.0
) -> list[ConsumerRecord]:
    """Every record of ``topic`` from the beginning to its current end (no consumer group, no commits).

    The end is taken from the high watermark that fetches report (correct on Tansu, unlike ListOffsets
    "latest"), and reading stops after ``idle_s`` without new records once that watermark is reached.
    """
    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, profile, None))
    await consumer.start()
    records: list[ConsumerRecord] = []
    try:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public refresh
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return records
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        started = time.monotonic()
        last_data = time.monotonic()
        while time.monotonic() - started < deadline_s:
            batch = await consumer.getmany(timeout_ms=100)
            for tp_records in batch.values():
                records.extend(tp_records)
            if batch:
                last_data = time.monotonic()
            caught_up = True
            for tp in tps:
                highwater = consumer.highwater(tp)
                if highwater is None or await consumer.position(tp) < highwater:
                    caught_up = False
                    break
            if caught_up and time.monotonic() - last_data >= min(idle_s, 0.2):
                break
            if not batch and time.monotonic() - last_data >= idle_s:
                break
        else:
            raise TimeoutError(f"reading {topic} did not reach its end within {deadline_s} s")
    finally:
        await consumer.stop()
    records.sort(key=lambda r: (r.partition, r.offset))
    return records


async def end_offsets(
    consumer: AIOKafkaConsumer, profile: BrokerProfile, tps: list[TopicPartition], *, deadline_s: float = 10.0
) -> dict[TopicPartition, int]:
    """The true end offset (high watermark) of each partition, on any broker.

    Kafka answers ListOffsets correctly. Tansu answers it with the newest *batch's* base offset + 1, which can be
    short of the end; there we seek just before that answer, fetch, and read the high watermark the fetch reports.
    The consumer must not be in a group (it is assigned ``tps`` here).
    """
    listed = await consumer.end_offsets(tps) if tps else {}
    if profile.latest_offsets_reliable or not tps:
        return dict(listed)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, max(0, listed[tp] - 1))
    result: dict[TopicPartition, int] = {tp: 0 for tp in tps if listed[tp] == 0}
    started = time.monotonic()
    while len(result) < len(tps) and time.monotonic() - started < deadline_s:
        await consumer.getmany(*[tp for tp in tps if tp not in result], timeout_ms=100)
        for tp in tps:
            highwater = consumer.highwater(tp)
            if tp not in result and highwater is not None:
                result[tp] = highwater
    for tp in tps:
        result.setdefault(tp, listed[tp])  # fall back to the listed offset rather than hang
    return result


def partition_for(key: str, partitions: int) -> int:
    """The partition a keyed record lands on with the default (murmur2) partitioner of our producers."""
    every = list(range(partitions))
    return DefaultPartitioner()(key.encode(), every, every)


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


def _partitions(tps: set[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(tps))


class StageFailed(RuntimeError):
    """A stage's background work raised an unexpected error; the worker stops with it."""


class Stage:
    """A consumer-group member running one stage: consume, handle, tick, commit what is safe."""

    name = "stage"
    consumes: tuple[str, ...] = ()
    tick_interval_s = 0.25

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.tracker = OffsetTracker()
        self.assigned: set[TopicPartition] = set()
        """Partitions this member owns now: it handles, produces for and commits only these."""
        self.views: list = []
        """Live state-topic views (``streams.topology.log_view.LogView``), closed when the stage stops."""
        self._to_rebuild: set[TopicPartition] = set()
        """Assigned by the group, state not rebuilt yet: paused until the main loop has rebuilt it."""
        self._releases = 0
        """Counts releases: a rebuild that saw one happen meanwhile does not take ownership."""
        self._stale: set[TopicPartition] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self.started = asyncio.Event()
        """Set once the consumer has started (joined its group); cleared when it stops."""
        self._background: set[asyncio.Task] = set()
        self._services: set[asyncio.Task] = set()
        self._failure: BaseException | None = None

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

    async def handle(self, record: ConsumerRecord) -> None:
        raise NotImplementedError

    async def handle_many(self, records: list[ConsumerRecord]) -> None:
        """Handle the records of one fetch, in order (override to process them concurrently)."""
        for record in records:
            await self.handle(record)

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

    def owns(self, tp: TopicPartition) -> bool:
        return tp in self.assigned

    def owner_partition(self, key: str) -> TopicPartition:
        """The input partition records keyed ``key`` arrive on (stages consuming one keyed topic)."""
        topic = self.settings.topic(self.consumes[0])
        count = len(self._consumer.partitions_for_topic(topic) or ()) if self._consumer is not None else 0
        return TopicPartition(topic, partition_for(key, count or self.settings.partitions))

    def owns_key(self, key: str) -> bool:
        return self.owner_partition(key) in self.assigned

    def mark_stale(self, tp: TopicPartition) -> None:
        """This partition's state was found stale (another writer took a number first): the main loop resets it."""
        if tp in self.assigned:
            self._stale.add(tp)

    async def release(self, revoked: set[TopicPartition]) -> None:
        """Fence revoked partitions: no handling, producing or committing for them from now on."""
        self._to_rebuild -= revoked
        revoked &= self.assigned
        if not revoked:
            return
        self._releases += 1
        self.assigned -= revoked
        self._stale -= revoked
        try:
            await self.on_revoked(revoked)
            await self.ctx.producer.flush()  # what was written before the fence lands before the next owner reads
            await self._commit(self.tracker.committable(revoked))
        finally:
            self.tracker.forget(revoked)
        self.ctx.count(f"partitions_released.{self.name}", len(revoked))
        log.info("%s: released %s", self.name, _partitions(revoked))

    async def acquire(self, assigned: set[TopicPartition]) -> None:
        """Newly assigned partitions: paused until the main loop has rebuilt their state (:meth:`rebuild`). The
        rebalance callback itself stays short, so a slow rebuild never makes this member miss a rebalance."""
        assigned -= self.assigned
        if not assigned:
            return
        self._to_rebuild |= assigned
        if self._consumer is not None:
            self._consumer.pause(*assigned)

    async def rebuild(self) -> None:
        """Rebuild the state of the partitions waiting for it, then own them and let their records in. A release
        during the rebuild voids it (partitions assigned again are queued again); a failure stops the worker."""
        pending, self._to_rebuild = self._to_rebuild, set()
        if not pending or self._consumer is None or self.ctx.stop.is_set():
            return
        releases = self._releases
        try:
            await self.on_assigned(pending)
        except Exception as error:  # a stage must not work on partitions whose state it could not rebuild
            self._fail(error)
            return
        owned = pending & self._consumer.assignment()
        if releases != self._releases:
            self._to_rebuild |= owned  # rebuild again: what was read may predate the release's writes
            return
        self.assigned |= owned
        self._consumer.resume(*owned)
        self.ctx.count(f"partitions_acquired.{self.name}", len(owned))
        log.info("%s: owns %s", self.name, _partitions(owned))

    async def reset_stale(self) -> None:
        """Partitions whose state went stale: release, seek back to the committed offset, rebuild, own again."""
        stale, self._stale = self._stale & self.assigned, set()
        if not stale or self._consumer is None:
            return
        log.warning("%s: another writer took a number first on %s; rebuilding from the logs", self.name,
                    _partitions(stale))
        self.ctx.count("state_resets")
        await self.release(stale)
        for tp in stale & self._consumer.assignment():
            await self._seek_committed(tp)
            await self.acquire({tp})

    async def _seek_committed(self, tp: TopicPartition) -> None:
        assert self._consumer is not None
        committed = await self._consumer.committed(tp)
        if committed is None:
            await self._consumer.seek_to_beginning(tp)
        else:
            self._consumer.seek(tp, committed)

    def _fail(self, error: BaseException) -> None:
        log.error("%s: %s: %s", self.name, type(error).__name__, error)
        if self._failure is None:
            self._failure = error
            self.ctx.stop.set()

    async def reject(
        self,
        record: ConsumerRecord,
        reason: str,
        error: BaseException | str,
        *,
        trace_id: str | None = None,
        playbook_id: str | None = None,
    ) -> None:
        """Send a consumed record to the dead-letter topic with the reason, and count it as done."""
        await self.ctx.dead_letter(
            make_dead_letter(self.name, reason, error, record.value, topic=record.topic, partition=record.partition,
                             offset=record.offset, key=record.key, trace_id=trace_id, playbook_id=playbook_id)
        )
        self.done(record)

    def read_state(self, record: ConsumerRecord, model: type[M]) -> M | None:
        """Parse a state-topic record; one that cannot be read becomes a dead letter (the rebuild goes on)."""
        try:
            return model.from_json_bytes(record.value)
        except (ValueError, ValidationError) as error:
            self.ctx.count("unreadable_state_records")
            self.spawn(self.ctx.dead_letter(make_dead_letter(
                self.name, f"unreadable {model.__name__} in {record.topic}: {error}", error, record.value,
                topic=record.topic, partition=record.partition, offset=record.offset, key=record.key)))
            return None

    def done(self, record: ConsumerRecord) -> None:
        tp = TopicPartition(record.topic, record.partition)
        if tp in self.assigned:
            self.tracker.done(tp, record.offset)

    async def commit(self) -> None:
        await self._commit(self.tracker.committable(self.assigned))

    async def _commit(self, offsets: dict) -> None:
        if offsets and self._consumer is not None:
            try:
                await self._consumer.commit(offsets)
            except Exception as error:  # commit failures are retried at the next tick; redelivery is harmless
                log.warning("%s: commit failed (%s: %s); will retry", self.name, type(error).__name__, error)
                self.tracker.commit_failed(set(offsets))

    async def run(self) -> None:
        """Consume until the worker's stop event is set."""
        consumer: AIOKafkaConsumer | None = None
        try:
            await self.prepare()
            consumer = AIOKafkaConsumer(
                **consumer_config(self.ctx.bootstrap, self.ctx.profile, self.settings.group(self.name))
            )
            self._consumer = consumer
            consumer.subscribe([self.settings.topic(t) for t in self.consumes], listener=_Rebalance(self))
            await consumer.start()
            self.started.set()
            log.info("%s: consuming %s", self.name, ", ".join(self.consumes))
            await self._consume(consumer)
            await self.drain()
            await self.wait_background()
            await self.commit()
        finally:
            self.started.clear()
            for view in self.views:
                view.close()
            await asyncio.gather(*self._services, return_exceptions=True)
            if consumer is not None:
                await consumer.stop()
            self._consumer = None

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        last_tick = 0.0
        while not self.ctx.stop.is_set():
            batch = await consumer.getmany(timeout_ms=100, max_records=self.fetch_limit())
            await self.rebuild()
            for tp, records in batch.items():
                if tp in self._to_rebuild:  # fetched before the pause took effect: rebuild first
                    await self.rebuild()
                if tp not in self.assigned:
                    if tp in consumer.assignment():  # still ours, state not rebuilt: start again from the commit
                        await self._seek_committed(tp)
                    continue  # else revoked: the next owner reads them
                for record in records:
                    self.tracker.consumed(tp, record.offset)
                self.ctx.count(f"records_in.{self.name}", len(records))
                await self.handle_many(records)
            await self.reset_stale()
            now = time.monotonic()
            if now - last_tick >= self.tick_interval_s:
                last_tick = now
                await self.tick(now)
                await self.commit()
