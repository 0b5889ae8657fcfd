"""Kafka clients configured for the broker: producer and consumer settings, starting a producer, and the partition a
key lands on (reading outside a group is ``streams.topology.topic_reader``'s)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

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


def partition_for(key: str, partitions: int) -> int:
    """The partition a keyed record lands on with the default (murmur2) partitioner of our producers."""
    every = list(range(partitions))
    return DefaultPartitioner()(key.encode(), every, every)
