"""On Tansu an idle consumer lets the broker hold its fetches longer (less CPU in the client and the broker) and is
back to the short wait at the first record (combee_core/partitions/fetch_wait.py, streams/broker/gapless_consumer.py).
"""

import asyncio
import time

import pytest
from aiokafka import TopicPartition

from streams.broker.admin import create_topics
from streams.topology.gapless_consumer import new_consumer
from streams.topology.kafka_clients import start_producer

pytestmark = pytest.mark.integration

CEILING_MS = 400


async def test_an_idle_consumer_backs_off_to_the_ceiling_and_reads_the_next_record_at_the_floor(kafka, unique_prefix):
    if kafka.profile.kind != "tansu":
        pytest.skip("the back-off is Tansu's only: Kafka answers a held fetch when a record arrives")
    topic = unique_prefix + "idle"
    await create_topics(kafka.bootstrap, {topic: 1}, connection=kafka.profile.connection)
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    consumer = new_consumer(kafka.bootstrap, kafka.profile.with_idle_fetch_wait(CEILING_MS), None)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    try:
        floor = kafka.profile.fetch_max_wait_ms
        deadline = time.monotonic() + 30
        while consumer._fetcher._fetch_max_wait_ms < CEILING_MS:  # the wait aiokafka puts in its next fetch request
            assert time.monotonic() < deadline, "an idle consumer's fetch wait did not reach the ceiling in 30 s"
            assert not await consumer.getmany(tp, timeout_ms=100)
        assert consumer._fetcher._fetch_max_wait_ms == CEILING_MS  # never above it
        await producer.send_and_wait(topic, b"after a quiet spell")
        got: list = []
        while not got:
            assert time.monotonic() < deadline + 30, "the record written after the quiet spell was not read"
            got = (await consumer.getmany(tp, timeout_ms=100)).get(tp, [])
        assert [r.value for r in got] == [b"after a quiet spell"]
        assert consumer._fetcher._fetch_max_wait_ms == floor  # back to the short wait at the first record
    finally:
        await asyncio.gather(consumer.stop(), producer.stop())
