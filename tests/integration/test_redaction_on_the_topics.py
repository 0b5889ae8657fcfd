"""Redaction on a real broker: personal data seeded in every text field of traces, the hand-written corpus of
secrets among them (and in unreadable trace records), appears on no topic after the ingest point, in no log line
(aiokafka's DEBUG included), in no recorded LLM prompt and not on the review page's provenance; with
``redact_before_produce`` it does not reach the traces topic either."""

from __future__ import annotations

import logging

import orjson
import pytest

from combee_core.models import PlaybookVersion, Trace
from combee_core.topology import TOPICS, Topic, enabled
from streams.review.log import provenance
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import make_traces, run_settings
from tests.redaction_corpus import SECRETS
from tests.seeded_personal_data import EMPLOYEE_PATTERN, SEEDED, seeded_trace

pytestmark = [pytest.mark.integration]


VALUES = {**SEEDED, **{f"corpus-{n}-{case.kind}": value for n, case in enumerate(SECRETS) for value in case.values}}
CORPUS = "\n".join(case.text for case in SECRETS)


def leaks(data: bytes | str) -> list[str]:
    """The seeded values (and the corpus's) found in ``data``."""
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    return [name for name, value in VALUES.items() if value in text or value.replace("\u00a0", "\\xa0") in text]


def with_corpus(trace: Trace) -> Trace:
    """``trace`` with the whole corpus in one more step (as a tool's output)."""
    return Trace.model_validate({**trace.model_dump(), "steps": [*trace.model_dump()["steps"],
                                                                 {"role": "tool", "content": CORPUS, "tool": "shell"}]})


def unreadable_records() -> list[bytes]:
    """Trace records the reflector cannot read, each holding seeded data (and, for two, in the reason too)."""
    trace = orjson.loads(seeded_trace(make_traces(1, seed=9)[0], 99).to_json_bytes())
    extra = {**trace, "contact": SEEDED["email"]}  # unknown field: a schema error
    long_key = {**trace, "metadata": {f"{SEEDED['email']} {'x' * 130}": 1}}  # the reason quotes the key
    return [orjson.dumps(extra), orjson.dumps(long_key), f"not json {SEEDED['card']} {SEEDED['openai']}".encode()]


async def test_seeded_personal_data_reaches_no_topic_after_ingest_no_log_and_no_prompt(kafka, unique_prefix, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="aiokafka")  # the most verbose: every request and record it sends
    settings = run_settings(unique_prefix, batch_size=12, redact_patterns=EMPLOYEE_PATTERN)
    base = make_traces(12, seed=5)
    traces = [with_corpus(seeded_trace(trace, n)) if n % 2 == 0 else trace for n, trace in enumerate(base)]
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            for raw in unreadable_records():
                await producer.send_and_wait(settings.topic(Topic.TRACES), raw, key=b"pb")
        finally:
            await producer.stop()
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions = await run.wait_for(lambda vs: sum(len(v.lineage) for v in vs) >= 12, timeout_s=120,
                                      what="a version of the 12 traces")
        dead = await run.dead_letters()
        shown = await provenance(settings, kafka.bootstrap, kafka.profile, [t for v in versions for t in v.lineage])
        published = {spec.topic: await read_topic(kafka.bootstrap, kafka.profile, settings.topic(spec.topic))
                     for spec in TOPICS if enabled(spec, settings)}

    raw_traces = published.pop(Topic.TRACES)
    assert sum(bool(leaks(r.value)) for r in raw_traces) == 9  # the ingest point holds them raw: 6 seeded + 3
    assert len(dead) == 3 and all(letter.topic == settings.topic(Topic.TRACES) for letter in dead)
    found = {topic: [leaks(r.value) + leaks(r.key or b"") for r in records if leaks(r.value) + leaks(r.key or b"")]
             for topic, records in published.items()}
    assert {topic: hits for topic, hits in found.items() if hits} == {}
    assert published[Topic.LLM_CALLS] and published[Topic.REFLECTIONS] and published[Topic.BATCHES]
    assert leaks(caplog.text) == [] and leaks(b"".join(orjson.dumps(c.messages) for c in run.calls)) == []
    assert "ProduceRequest" in caplog.text  # aiokafka's DEBUG lines were on
    # the review page's provenance: the traces behind the versions, read raw from `traces`, shown redacted
    reflections, page_traces = shown
    assert len(page_traces) == 12 and reflections
    assert [leaks(t.to_json_bytes()) for t in page_traces if leaks(t.to_json_bytes())] == []
    assert sum("[EMAIL]" in t.input for t in page_traces) == 6

    # ...and it is redaction, not loss: the seeded lesson was learned with its placeholders; ids stay distinct.
    contents = [e.content for v in versions for e in PlaybookVersion.model_validate(v).entries]
    assert any("[EMAIL]" in c and "[PHONE]" in c for c in contents), contents
    assert len({t for v in versions for t in v.lineage}) == 12
    assert any("[SECRET]" in (d.original_text or "") for d in dead) and any("[EMAIL]" in d.reason for d in dead)
    assert run.counters["redactions.reflect.EMAIL"] >= 6 * 5 and run.counters["redactions.reflect.EMPLOYEE"] >= 12
    assert run.counters["redactions.reflect.CARD"] >= 6 * 3


async def test_redact_before_produce_keeps_raw_traces_out_of_the_traces_topic(kafka, unique_prefix):
    settings = run_settings(unique_prefix, redact_before_produce=True, redact_patterns=EMPLOYEE_PATTERN)
    traces = [seeded_trace(trace, n) for n, trace in enumerate(make_traces(3, seed=4))]
    from streams.topology.worker import ensure_topics

    await ensure_topics(settings, kafka.bootstrap, connection=kafka.profile.connection)
    await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
    records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.TRACES))
    assert len(records) == 3 and [leaks(r.value) for r in records] == [[], [], []]
    assert all(b"[EMAIL]" in r.value for r in records)
