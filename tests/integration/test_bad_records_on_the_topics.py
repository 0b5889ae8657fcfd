"""One bad record never stops a stage, on the real broker: recursion bombs on the OTLP topic (one the decoder cannot
read, one whose span the mapping cannot) and on the traces topic (with invalid UTF-8 and a wrong type) become dead
letters with their reasons, and the good records written after them still make a playbook version."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core.ingest.redaction import RedactionConfig
from combee_core.models import PlaybookVersion, Trace
from combee_core.otlp.wire import encode_request
from streams.testing.otel_agent import SeededIds, export_request, run_agent, tracer_provider
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.topic_reader import read_topic
from tests.integration.test_otlp_ingest import RUNS, _runs, _settings
from tests.integration.test_otlp_openinference_doors import learned_ids

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = "otel-bad"
DEPTH = 100_000
BOMB = b"[" * DEPTH + b"]" * DEPTH  # 200 KB


def _attribute_bomb(record: bytes) -> bytes:
    """An OTLP/JSON record whose first span carries a JSON-string attribute nested too deeply to read."""
    document = json.loads(record)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span.setdefault("attributes", []).append({"key": "gen_ai.input.messages", "value": {"stringValue": "[" * DEPTH}})
    return json.dumps(document).encode()


async def _learned(run: InProcessPipeline, count: int, timeout_s: float = 120.0
                   ) -> tuple[list[Trace], list[PlaybookVersion]]:
    """Wait for ``count`` readable traces on the traces topic (the bad records written there are skipped), then until
    each is in a version's lineage (under its id as the reflector's redaction leaves it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run.check_alive()
        traces = []
        for record in await read_topic(run.bootstrap, run.profile, run.settings.topic("traces")):
            try:
                traces.append(Trace.from_json_bytes(record.value))
            except ValueError:
                continue  # one of the bad records this test wrote
        if len(traces) >= count:
            break
        assert time.monotonic() < deadline, f"{len(traces)} of {count} traces after {timeout_s:.0f} s"
        await asyncio.sleep(0.5)
    learned = learned_ids(traces, RedactionConfig.from_settings(run.settings))
    return traces, await run.wait_for_lineage(learned, timeout_s=timeout_s)


async def test_recursion_bombs_on_the_otlp_and_traces_topics_are_dead_letters_and_ingest_goes_on(kafka,
                                                                                                 unique_prefix):
    settings = _settings(unique_prefix)
    exporter = InMemorySpanExporter()
    provider = tracer_provider(exporter, id_generator=SeededIds(seed=1))
    bombed = _runs(PLAYBOOK, seed=11)[0]
    run_agent(provider, bombed)
    mapped_bomb = _attribute_bomb(encode_request(export_request(exporter.get_finished_spans()), "otlp_json"))
    exporter.clear()
    for simulated in _runs(PLAYBOOK):
        run_agent(provider, simulated)
    good = [encode_request(export_request([span]), "otlp_proto") for span in exporter.get_finished_spans()]
    traces_topic = settings.topic("traces")
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=["ingest-otlp", "reflect", "batch",
                                                                                  "aggregate", "reduce"]) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            await producer.send_and_wait(settings.otlp_topic, b'{"resourceSpans": ' + BOMB + b"}")
            await producer.send_and_wait(settings.otlp_topic, mapped_bomb)
            for bad in (b'{"trace_id": "bomb", "input": ' + BOMB + b"}", b'{"trace_id": "\xff\xfe"}',
                        b'{"trace_id": ["t"], "playbook_id": 7}'):
                await producer.send_and_wait(traces_topic, bad, key=PLAYBOOK.encode())
            for record in good:
                await producer.send_and_wait(settings.otlp_topic, record)
        finally:
            await producer.stop()
        traces, versions = await _learned(run, RUNS)
        dead = await run.dead_letters()
    assert {t.task_id for t in traces} == {r.task_id for r in _runs(PLAYBOOK)}
    assert any(v.playbook_id == PLAYBOOK and v.entries for v in versions)
    ingest = [d for d in dead if d.stage == "ingest-otlp"]
    assert any(d.reason.startswith("unreadable") and "nested too deeply" in d.reason for d in ingest)
    assert any("cannot be mapped: RecursionError" in d.reason for d in ingest)
    reflect = [d for d in dead if d.stage == "reflect" and d.topic == traces_topic]
    assert len(reflect) == 3 and all(d.reason for d in reflect)
    assert any(d.original_size == len(BOMB) + len(b'{"trace_id": "bomb", "input": }') for d in reflect)
