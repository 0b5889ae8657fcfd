"""A reader at the end of a log that several producers write at once reads every acknowledged record, and a stage
consumer does too (issue 44: two aggregators' partials to one reducer; the reducer never read 2 of a batch's 54,
and that playbook built no version after it).

Tansu advances a partition's high watermark before it writes the batch; a fetch in between is answered with the
next batch that exists, and aiokafka's position moves past the record being written (``combee_core.log_order``).
Without the gapless consumer this test missed 0-3 of 800 records per round (most rounds miss some; it runs rounds
until one misses or ROUNDS pass).
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from streams.broker.admin import create_topics
from streams.topology.gapless_consumer import new_consumer
from streams.topology.kafka_clients import start_producer
from streams.topology.topic_reader import TopicReader

pytestmark = pytest.mark.integration

PRODUCERS = 8
RECORDS = 100
PAYLOAD = b"x" * 60_000
"""Large records (a partial is tens of KB) make each write last long enough for a reader to fetch meanwhile."""
ROUNDS = 3
IDLE_S = 3.0
"""How long the reader keeps reading once every record is acknowledged, for the last ones."""


async def _produce(kafka, topic: str, name: str) -> list[str]:
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        sent = []
        for index in range(RECORDS):
            value = f"{name}-{index}"
            await producer.send(topic, value.encode() + b"|" + PAYLOAD, partition=0)
            sent.append(value)
            if index % 10 == 9:
                await asyncio.sleep(0.03)
        await producer.flush()
        return sent
    finally:
        await producer.stop()


async def _read_while_written(reader_fetch, done: asyncio.Event) -> list[str]:
    read: list[str] = []
    loop = asyncio.get_running_loop()
    active = loop.time()
    while not done.is_set() or loop.time() - active < IDLE_S:
        batch = await reader_fetch()
        values = [r.value.split(b"|", 1)[0].decode() for records in batch.values() for r in records]
        read += values
        if values or not done.is_set():
            active = loop.time()
    return read


async def _round(kafka, topic: str, reader_fetch) -> tuple[list[str], list[str]]:
    done = asyncio.Event()
    reading = asyncio.create_task(_read_while_written(reader_fetch, done))
    sent = await asyncio.gather(*[_produce(kafka, topic, f"p{n}") for n in range(PRODUCERS)])
    done.set()
    return [value for values in sent for value in values], await asyncio.wait_for(reading, 120)


async def test_a_reader_at_the_end_of_a_log_written_by_several_producers_reads_every_record(kafka, unique_prefix):
    topic = f"{unique_prefix}gaps"
    await create_topics(kafka.bootstrap, {topic: 1}, connection=kafka.profile.connection)
    tp = TopicPartition(topic, 0)
    async with TopicReader(kafka.bootstrap, kafka.profile) as reader:
        await reader.assign([tp])
        for _ in range(ROUNDS):
            sent, read = await _round(kafka, topic, lambda: reader.fetch(tp, timeout_ms=100))
            assert sorted(set(sent) - set(read)) == []
            assert len(read) == len(set(read)) == len(sent)


async def test_a_stage_consumer_in_a_group_reads_every_record_written_by_several_producers(kafka, unique_prefix):
    topic = f"{unique_prefix}gapsgroup"
    await create_topics(kafka.bootstrap, {topic: 1}, connection=kafka.profile.connection)
    consumer = new_consumer(kafka.bootstrap, kafka.profile, f"{unique_prefix}group")
    consumer.subscribe([topic])
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        for _ in range(ROUNDS):
            sent, read = await _round(kafka, topic, lambda: consumer.getmany(timeout_ms=100))
            assert sorted(set(sent) - set(read)) == []
    finally:
        await consumer.stop()
