"""The shared reader of topics outside a consumer group (streams/topology/topic_reader.py), on the real broker:
reading to the end, reading only what is new since the last read, following, and topics it has not seen yet."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from streams.broker.admin import create_topics
from streams.topology.kafka_clients import start_producer
from streams.topology.topic_reader import TopicReader, TopicTail, read_topic

pytestmark = pytest.mark.integration


async def _send(kafka, topic: str, values: list[bytes]) -> None:
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        for value in values:
            await producer.send(topic, value, key=b"k")
        await producer.flush()
    finally:
        await producer.stop()


async def test_reads_to_the_end_then_only_what_is_new(kafka, unique_prefix):
    topic = f"{unique_prefix}log"
    assert await read_topic(kafka.bootstrap, kafka.profile, topic) == []  # no topic yet: nothing, no hang
    await create_topics(kafka.bootstrap, {topic: 1}, connection=kafka.profile.connection)
    await _send(kafka, topic, [b"a", b"b", b"c"])
    assert [r.value for r in await read_topic(kafka.bootstrap, kafka.profile, topic)] == [b"a", b"b", b"c"]

    tail = TopicTail(kafka.bootstrap, kafka.profile, topic)
    assert [r.value for r in await tail.read_new()] == [b"a", b"b", b"c"]
    assert await tail.read_new() == []
    await _send(kafka, topic, [b"d"])
    new = await tail.read_new()
    assert [(r.offset, r.value) for r in new] == [(3, b"d")]


async def test_follows_records_as_they_arrive_and_finds_a_new_topic(kafka, unique_prefix):
    topic = f"{unique_prefix}followed"
    async with TopicReader(kafka.bootstrap, kafka.profile) as reader:
        assert await reader.partitions(topic) == []
        await create_topics(kafka.bootstrap, {topic: 2}, connection=kafka.profile.connection)
        tps = await reader.partitions(topic, refresh=True)
        assert tps == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        await reader.assign(tps)
        stop = asyncio.Event()
        seen: list[bytes] = []

        async def follow() -> None:
            async for records in reader.follow(stop):
                seen.extend(r.value for r in records)
                if len(seen) >= 3:
                    stop.set()

        following = asyncio.create_task(follow())
        await _send(kafka, topic, [b"x", b"y", b"z"])
        await asyncio.wait_for(following, 30)
        assert sorted(seen) == [b"x", b"y", b"z"]
        ends = await reader.end_offsets(tps)
        assert sum(ends.values()) == 3
