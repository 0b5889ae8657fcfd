"""Retention on the durable broker, on real processes: the old batches of ``traces`` and ``dlq`` go once every
consumer group has committed past them, ``playbook`` keeps every record, what remains reads back (from the beginning,
for a new group, after every process of the broker was killed and it started again) and the log's end does not
move."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.broker.admin import create_topics
from streams.broker.durable import DurableBroker
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import consumer_config, start_producer
from streams.topology.topic_reader import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPICS = ("ret.traces", "ret.dlq", "ret.playbook")
RECORDS = 10
COMMITTED = 6


async def _values(bootstrap: str, topic: str) -> list[bytes]:
    return [record.value for record in await read_topic(bootstrap, BrokerProfile.for_tansu(), topic, deadline_s=60)]


async def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, BrokerProfile.for_tansu(), group))
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): offset})
    finally:
        await consumer.stop()


async def _first_read_by_a_new_group(bootstrap: str, topic: str) -> bytes:
    consumer = AIOKafkaConsumer(topic, **consumer_config(bootstrap, BrokerProfile.for_tansu(), "ret.newcomer"))
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 60)
        return record.value
    finally:
        await consumer.stop()


async def test_old_batches_of_growing_topics_go_and_the_rest_reads_back_after_a_kill(tmp_path):
    broker = DurableBroker(tmp_path, retention_s=0.0)
    await broker.start()
    try:
        await create_topics(broker.bootstrap, dict.fromkeys(TOPICS, 1))
        producer = await start_producer(broker.bootstrap, BrokerProfile.for_tansu())
        for topic in TOPICS:
            for number in range(RECORDS):  # one acknowledged batch each
                await producer.send_and_wait(topic, f"r{number}".encode())
        await producer.stop()
        await _commit(broker.bootstrap, "ret.stage", "ret.traces", COMMITTED)

        stop, lines = asyncio.Event(), []
        supervising = asyncio.create_task(broker.supervise(stop, lines.append))
        async with asyncio.timeout(60):  # the supervisor's first pass runs as it starts
            while not any("retention" in line for line in lines):
                await asyncio.sleep(0.2)
        stop.set()
        assert await supervising is None
        assert "ret.traces/0 6" in lines[-1] and "ret.dlq/0 9" in lines[-1], lines
        assert "playbook" not in lines[-1]
        assert broker.storage is not None and broker.tansu is not None
        for pid in (broker.tansu.pid, broker.storage.pid):
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
    finally:
        await broker.stop()

    again = DurableBroker(tmp_path, retention_s=None)
    await again.start()
    try:
        expected = [f"r{n}".encode() for n in range(RECORDS)]
        assert await _values(again.bootstrap, "ret.traces") == expected[COMMITTED:]
        assert await _values(again.bootstrap, "ret.dlq") == expected[-1:]
        assert await _values(again.bootstrap, "ret.playbook") == expected
        assert await _first_read_by_a_new_group(again.bootstrap, "ret.traces") == f"r{COMMITTED}".encode()
        producer = await start_producer(again.bootstrap, BrokerProfile.for_tansu())
        metadata = await producer.send_and_wait("ret.traces", b"after")
        await producer.stop()
        assert metadata.offset == RECORDS  # the log's end did not move
    finally:
        await again.stop()
