"""Faults at the edges, on the real broker: records no stage can use must never stop a stage or block a partition."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from combee_core import limits
from combee_core.models import DeadLetter
from streams.topology.pipeline import InProcessPipeline
from streams.topology.runtime import producer_config, read_topic
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIB = 1024 * 1024


async def test_poison_records_become_bounded_dead_letters_and_later_traces_still_become_versions(
    kafka, unique_prefix
):
    settings = run_settings(unique_prefix, batch_size=10)
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
