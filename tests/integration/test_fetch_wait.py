"""A caught-up stage consumer reads a new record soon after it is written, on Tansu as on Kafka.

Tansu holds a fetch that has no data for the whole fetch wait even when records arrive meanwhile (docs/broker.md), so
with aiokafka's default wait (500 ms) every hop between two stages cost ~200 ms there; the broker profile's
``fetch_max_wait_ms`` bounds it.
"""

import asyncio
import statistics
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.broker.admin import create_topics
from streams.topology.kafka_clients import consumer_config, start_producer

RECORDS = 12
HOP_S = 0.1
"""What one hop between stages may add to a trace's way to a version once the consumer is caught up."""


async def test_a_caught_up_consumer_reads_each_new_record_within_the_profiles_fetch_wait(kafka, unique_prefix):
    topic = unique_prefix + "hop"
    await create_topics(kafka.bootstrap, {topic: 1})
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    consumer = AIOKafkaConsumer(**consumer_config(kafka.bootstrap, kafka.profile, None))
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    acked, read = [], []
    try:
        for index in range(RECORDS):
            assert not await consumer.getmany(tp, timeout_ms=kafka.profile.fetch_max_wait_ms * 3)  # caught up
            started = time.perf_counter()
            await producer.send_and_wait(topic, f"record {index}".encode())
            acked.append(time.perf_counter() - started)
            got: list = []
            while not got:
                got = (await consumer.getmany(tp, timeout_ms=5000)).get(tp, [])
            read.append(time.perf_counter() - started)
            assert [r.value for r in got] == [f"record {index}".encode()]
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()
        await producer.stop()
    # The machine's speed in this run: a produce acknowledgement (~6 ms on an idle 2-core machine) is the unit of
    # margin. With aiokafka's default wait (500 ms), Tansu took ~200 ms here, whatever the load.
    margin_s = 5 * statistics.median(acked)
    delay_s = statistics.median(r - a for r, a in zip(read, acked, strict=True))
    assert delay_s < HOP_S + margin_s, (delay_s, margin_s)
