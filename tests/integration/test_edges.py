"""Faults at the edges, on the real broker: records no stage can use must never stop a stage or block a partition."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from combee_core import limits
from combee_core.models import DeadLetter
from streams.topology.kafka_clients import producer_config
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ensure_topics
from tests.integration.topology_support import SIZE_CLOSES_S, make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIB = 1024 * 1024


async def test_poison_records_become_bounded_dead_letters_and_later_traces_still_become_versions(
    kafka, unique_prefix
):
    settings = run_settings(unique_prefix, batch_size=10, max_wait_s=SIZE_CLOSES_S)  # 2 batches, closed by size
    *traces, spare = make_traces(21, seed=3)
    typed_wrong = {**orjson.loads(spare.to_json_bytes()), "success": "yes"}
    poison = [
        b"\x01" * (3 * MIB // 2),  # serialised naively, its dead letter was 9 MB (6 bytes per \u0001)
        b'"' * (5 * MIB),
        orjson.dumps(typed_wrong),  # readable ids, but "yes" is not a boolean
    ]
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        producer = AIOKafkaProducer(**producer_config(kafka.bootstrap, kafka.profile))
        await producer.start()
        try:
            topic = settings.topic("traces")  # one key: the poison and the traces after it share a partition
            for value in [t.to_json_bytes() for t in traces[:10]] + poison + [t.to_json_bytes() for t in traces[10:]]:
                await producer.send_and_wait(topic, value, key=b"pb")
        finally:
            await producer.stop()
        trace_ids = {t.trace_id for t in traces}
        versions = await run.wait_for(lambda vs: trace_ids <= {t for v in vs for t in v.lineage}, timeout_s=90,
                                      what="every valid trace in a lineage")
        raw_letters = await read_topic(kafka.bootstrap, kafka.profile, settings.topic("dlq"))
        run.check_alive()

    assert [v.version for v in versions] == [1, 2]
    assert all(len(record.value) < limits.MAX_DEAD_LETTER_BYTES for record in raw_letters)
    letters = [DeadLetter.from_json_bytes(record.value) for record in raw_letters]
    assert len(letters) == 3 and {d.stage for d in letters} == {"reflect"}
    for letter, original in zip(letters, poison):
        assert letter.original_size == len(original)
        assert letter.original_sha256 == hashlib.sha256(original).hexdigest()
        assert letter.topic == settings.topic("traces") and letter.offset is not None
    assert [d.truncated for d in letters] == [True, True, False]
    assert all("over the limit" in d.reason for d in letters[:2])
    assert "success" in letters[2].reason and "boolean" in letters[2].reason
    assert (letters[2].trace_id, letters[2].playbook_id) == (spare.trace_id, spare.playbook_id)


async def test_bad_records_in_state_topics_and_on_stage_inputs_are_dead_letters_and_the_run_goes_on(
    kafka, unique_prefix
):
    """Every stage decodes its input and its state through one guard: a record it cannot read, on an input topic or
    in a state or checkpoint topic read at start, is a dead letter with its reason, and nothing stops."""
    settings = run_settings(unique_prefix, batch_size=10, max_wait_s=SIZE_CLOSES_S)  # 2 batches, closed by size
    traces = make_traces(20, seed=4)
    await ensure_topics(settings, kafka.bootstrap)
    bad = {
        "batches": b'{"playbook_id": "pb", "batch_id": ',  # the batcher and the reducer rebuild from this log
        "checkpoints": b'{"view": "batch/batches", "position": "far"}',  # every checkpointed view reads these
        "partials": b'{"playbook_id": "pb", "batch_id": "one"}',  # the reducer's input
        "metrics": b"[1, 2, 3]",  # the controller's input
    }
    producer = AIOKafkaProducer(**producer_config(kafka.bootstrap, kafka.profile))
    await producer.start()
    try:
        for topic, value in bad.items():
            await producer.send_and_wait(settings.topic(topic), value, key=b"pb")
    finally:
        await producer.stop()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions = await run.wait_for(lambda vs: len(vs) >= 2, timeout_s=90, what="2 versions")
        expected = {("batch", "batches"), ("reduce", "batches"), ("batch", "checkpoints"), ("reduce", "checkpoints"),
                    ("reduce", "partials"), ("control", "metrics")}
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # the dead letters of state records are sent in the background
            letters = await run.dead_letters()
            seen = {(d.stage, (d.topic or "").removeprefix(settings.topic(""))) for d in letters}
            if expected <= seen or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        run.check_alive()

    assert [v.version for v in versions] == [1, 2]
    assert {t for v in versions for t in v.lineage} == {t.trace_id for t in traces}
    by_topic: dict[str, set[str]] = {}
    for letter in letters:
        assert letter.topic is not None and letter.offset == 0 and letter.original_text is not None
        by_topic.setdefault(letter.topic.removeprefix(settings.topic("")), set()).add(letter.stage)
        assert bad[letter.topic.removeprefix(settings.topic(""))].decode() == letter.original_text
    assert by_topic["batches"] == {"batch", "reduce"}
    assert {"batch", "reduce"} <= by_topic["checkpoints"]
    assert by_topic["partials"] == {"reduce"} and by_topic["metrics"] == {"control"}
    reasons = {(d.stage, d.topic.removeprefix(settings.topic(""))): d.reason for d in letters if d.topic}
    assert reasons[("batch", "batches")].startswith("unreadable BatchManifest in ")
    assert reasons[("reduce", "checkpoints")].startswith("unreadable ViewCheckpoint in ")
    assert reasons[("reduce", "partials")].startswith("unreadable partial: ")
    assert reasons[("control", "metrics")].startswith("unreadable batch metrics: ")
    assert [d.playbook_id for d in letters if d.topic == settings.topic("partials")] == ["pb"]
