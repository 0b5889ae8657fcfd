"""What the broker says about traces a run lost (for a failing fault test's message): where their reflections are
on ``reflections`` and how far the batch stage's group has committed each partition."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from combee_core.models import Reflection
from combee_core.settings import CombeeSettings
from combee_core.topology import BATCH, Topic
from streams.broker.connection import client_kwargs
from streams.testing.broker_under_test import ResolvedBroker
from streams.topology.topic_reader import read_topic


async def explain_missing(settings: CombeeSettings, broker: ResolvedBroker, missing: list[str]) -> list[str]:
    """One line per partition holding reflections of ``missing`` traces: the batch group's committed offset, the
    partition's end, and each missing trace's reflection offsets."""
    if not missing:
        return []
    wanted = set(missing)
    topic = settings.topic(Topic.REFLECTIONS)
    records = await read_topic(broker.bootstrap, broker.profile, topic)
    ends: dict[int, int] = {}
    found: dict[int, dict[str, list[int]]] = {}
    for record in records:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
        trace_id = Reflection.from_json_bytes(record.value).trace_id
        if trace_id in wanted:
            found.setdefault(record.partition, {}).setdefault(trace_id, []).append(record.offset)
    admin = AIOKafkaAdminClient(**client_kwargs(broker.bootstrap, broker.profile.connection))
    await admin.start()
    try:
        # the partitions named: asked for all of a group's (OffsetFetch with no topics), Tansu 0.6.0 answers with a
        # reply aiokafka cannot decode (a KafkaConnectionError in the middle of the failing test's report)
        partitions = [TopicPartition(topic, p) for p in sorted(set(range(settings.partitions)) | set(ends))]
        committed = await admin.list_consumer_group_offsets(settings.group(BATCH.name), partitions=partitions)
    finally:
        await admin.close()
    commits = {tp.partition: meta.offset for tp, meta in committed.items() if meta is not None and meta.offset >= 0}
    lines = [f"reflections[{partition}]: batch group committed {commits.get(partition)}, end {ends.get(partition)}; "
             f"missing traces' reflection offsets {dict(sorted(traces.items()))}"
             for partition, traces in sorted(found.items())]
    unreflected = sorted(wanted - {t for traces in found.values() for t in traces})
    return lines + ([f"{len(unreflected)} missing trace(s) with no reflection: {unreflected[:20]}"] if unreflected
                    else [])
