"""A failing fault test's report on lost traces, against the real broker: where each missing trace's reflection is
and how far the batch stage's group committed (it crashed on Tansu's reply when it asked for all of a group's
offsets)."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition

from combee_core.models import Insight, Reflection
from combee_core.topology import BATCH, Topic
from streams.broker.admin import create_topics
from streams.testing.loss_report import explain_missing
from streams.testing.worker_fleet import fleet_settings
from streams.topology.kafka_clients import consumer_config, start_producer


async def test_the_report_names_reflection_offsets_and_the_batch_groups_commit(kafka, unique_prefix):
    settings = fleet_settings(unique_prefix)
    topic = settings.topic(Topic.REFLECTIONS)
    await create_topics(kafka.bootstrap, {topic: settings.partitions}, connection=kafka.profile.connection)
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        for number in range(3):
            reflection = Reflection(reflection_id=f"r{number}", trace_id=f"t{number}", playbook_id="pb",
                                    seen_version=0, model="test", insights=[Insight(section="tools", content="x")])
            await producer.send_and_wait(topic, reflection.to_json_bytes(), partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**consumer_config(kafka.bootstrap, kafka.profile, settings.group(BATCH.name)))
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): 2})
    finally:
        await consumer.stop()

    lines = await explain_missing(settings, kafka, ["t2", "t9"])

    assert lines[0] == "reflections[0]: batch group committed 2, end 3; missing traces' reflection offsets {'t2': [2]}"
    assert lines[1] == "1 missing trace(s) with no reflection: ['t9']"
