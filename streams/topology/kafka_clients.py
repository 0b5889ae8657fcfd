"""Kafka clients configured for the broker: producer and consumer settings, reading a topic to its end, end offsets
that are right on Tansu too, and the partition a key lands on."""

from __future__ import annotations

import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord

from streams.broker.connection import client_kwargs
from streams.broker.profile import FETCH_MAX_BYTES, MAX_REQUEST_BYTES, BrokerProfile


def producer_config(bootstrap: str, profile: BrokerProfile) -> dict[str, Any]:
    """aiokafka producer settings for this broker (no idempotence: the embedded broker cannot do it)."""
    return dict(
        **client_kwargs(bootstrap, profile.connection),
        acks="all",
        enable_idempotence=False,
        max_request_size=MAX_REQUEST_BYTES,
        linger_ms=5,
        request_timeout_ms=30_000,
    )


def consumer_config(bootstrap: str, profile: BrokerProfile, group_id: str | None) -> dict[str, Any]:
    """aiokafka consumer settings: manual commits, earliest reset, large fetches for big messages."""
    return dict(
        **client_kwargs(bootstrap, profile.connection),
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=profile.session_timeout_ms,
        heartbeat_interval_ms=profile.heartbeat_interval_ms,
        rebalance_timeout_ms=profile.rebalance_timeout_ms,
        max_partition_fetch_bytes=FETCH_MAX_BYTES,
        fetch_max_bytes=FETCH_MAX_BYTES,
        fetch_max_wait_ms=profile.fetch_max_wait_ms,
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
