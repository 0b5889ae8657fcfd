"""OpenInference runs learn through both OTLP doors on the real broker: evaluations as ``evaluations.N.evaluation.*``
span attributes, as ``gen_ai.evaluation.result`` events, and post hoc on a carrier span linked to the run; masked
runs (``"__REDACTED__"``) are dead letters. The OTLP/HTTP door is one command, ``combee worker --otlp``, and a
receiver with nothing ingesting answers 503 with the reason. Each trace is learned under its id as the reflector's
redaction leaves it, which the versions' lineages name (docs/redaction.md): a card-shaped number inside a random OTel
trace id (the first run's, here) is no card, and the id is learned as it was sent."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core.ingest.redaction import RedactionConfig, Redactor
from combee_core.models import DeadLetter, PlaybookVersion, Trace
from combee_core.otlp.wire import encode_request
from combee_core.sim.task_suite import build_suite, train_traces
from streams.testing.otel_agent import (
    SeededIds,
    export_request,
    report_openinference_evaluation,
    run_openinference_agent,
    tracer_provider,
)
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.topic_reader import read_topic
from tests.integration.test_health import _stderr_until
from tests.integration.topology_support import env_without_combee, run_settings, serving_receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNS = 12
CARD_IN_ID = int("c0ffee" "4111111111111111" "abcdefabcd", 16)
"""The first run's OTel trace id: it holds a Luhn-valid card number inside its hex, as about one random OTel trace id
in 2,000 does (measured: 101 of 200,000); the lineage must name it as sent (it was pseudonymised once: a CI flake)."""


def _runs(playbook: str, seed: int = 1) -> list[Trace]:
    return train_traces(build_suite(seed=7), RUNS + 1, playbook_ids=(playbook,), run_seed=seed, agents=4)


def _ids() -> SeededIds:
    return SeededIds(seed=1, first_trace_ids=[CARD_IN_ID])


def _agent(provider, runs: list[Trace]) -> None:
    """Half the runs evaluated in attributes, half in events, the last post hoc on a linked carrier; one masked."""
    *inline, late, masked = runs
    for index, run in enumerate(inline):
        run_openinference_agent(provider, run, evaluation="attributes" if index % 2 else "event")
    context = run_openinference_agent(provider, late, evaluation="none")
    report_openinference_evaluation(provider, context, late)
    run_openinference_agent(provider, masked, masked=True)


def learned_ids(traces: list[Trace], redaction: RedactionConfig) -> set[str]:
    """The ids the traces are learned under: each trace's id as the reflector's redaction leaves it."""
    return {Redactor(redaction).identifier(t.trace_id) for t in traces}


def _check(traces: list[Trace], versions: list[PlaybookVersion], dead: list[DeadLetter], runs: list[Trace],
           redaction: RedactionConfig) -> None:
    assert sorted(t.task_id for t in traces) == sorted(r.task_id for r in runs[:RUNS])
    by_task = {r.task_id: r for r in runs}
    assert all(t.feedback.endswith(by_task[t.task_id].feedback) and t.score == by_task[t.task_id].score
               for t in traces)  # each run's own evaluation, whichever form carried it
    [late] = [t for t in traces if t.task_id == runs[RUNS - 1].task_id]
    assert late.input == runs[RUNS - 1].input and late.metadata["otlp.feedback"].startswith(("joined", "with-run"))
    lineage = {t for v in versions for t in v.lineage}
    assert lineage == learned_ids(traces, redaction)
    carded = f"otel:{CARD_IN_ID:032x}"  # a card-shaped run inside an id is no card: learned as sent
    assert carded in {t.trace_id for t in traces} and carded in lineage
    assert any(v.entries for v in versions)
    assert [d.stage for d in dead if "masked at the source" in d.reason] == ["ingest-otlp"]


async def _read(kafka, topic: str, model):
    return [model.model_validate_json(r.value) for r in await read_topic(kafka.bootstrap, kafka.profile, topic)]


async def test_one_worker_command_with_otlp_learns_openinference_runs_over_http(kafka, unique_prefix):
    runs = _runs("oi-http")
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
         "--batch-size", str(RUNS), "--partitions", "1", "--max-wait", "2", "--stages",
         "ingest-otlp,reflect,batch,aggregate,reduce", "--otlp", "--otlp-port", "0", "--otlp-topic",
         f"{unique_prefix}otlp_spans", "--otlp-feedback-wait", "30"],
        env=env_without_combee(COMBEE_SIM_CLOCK="virtual"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        started = await _stderr_until(process, "worker: OTLP/HTTP receiver on", 90)
        url = started.splitlines()[-1].split(" on ")[1].split()[0]
        empty = encode_request(export_request([]), "otlp_proto")
        deadline = time.monotonic() + 90
        async with aiohttp.ClientSession() as http:  # 503 until the worker's ingest-otlp has joined its group
            while True:
                async with http.post(url, data=empty, headers={"Content-Type": "application/x-protobuf"}) as answer:
                    if answer.status == 200:
                        break
                    assert answer.status == 503 and time.monotonic() < deadline, await answer.text()
                await asyncio.sleep(0.5)
        await asyncio.to_thread(_agent, tracer_provider(OTLPSpanExporter(endpoint=url), id_generator=_ids()), runs)
        deadline = time.monotonic() + 120
        while True:
            traces = await _read(kafka, f"{unique_prefix}traces", Trace)
            versions = await _read(kafka, f"{unique_prefix}playbook", PlaybookVersion)
            missing = learned_ids(traces, RedactionConfig()) - {t for v in versions for t in v.lineage}
            if len(traces) == RUNS and not missing:
                break
            assert process.poll() is None and time.monotonic() < deadline, \
                f"{len(traces)} traces, {len(versions)} versions; in no lineage: {sorted(missing)}"
            await asyncio.sleep(1)
        dead = await _read(kafka, f"{unique_prefix}dlq", DeadLetter)
    except AssertionError as failure:  # say what the worker said, then fail as it would
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait, 30)
        raise AssertionError(f"{failure}\nworker's stderr:\n{process.stderr.read()[-4000:]}") from failure
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    assert returncode == 0, process.stderr.read()
    _check(traces, versions, dead, runs, RedactionConfig())  # the worker's: the default settings


async def test_collector_kafka_records_of_openinference_runs_learn(kafka, unique_prefix):
    settings = run_settings(unique_prefix, otlp_ingest=True, otlp_topic=f"{unique_prefix}otlp_spans",
                            otlp_feedback_wait_s=30.0, batch_size=RUNS, max_wait_s=2.0, partitions=1)
    runs = _runs("oi-kafka")
    exporter = InMemorySpanExporter()
    _agent(tracer_provider(exporter, id_generator=_ids()), runs)
    spans = exporter.get_finished_spans()
    records = [encode_request(export_request(spans[i:i + 5]), "otlp_proto") for i in range(0, len(spans), 5)]
    records.append(records[0])  # an exporter retry
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=["ingest-otlp", "reflect", "batch",
                                                                                  "aggregate", "reduce"]) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            for record in records:
                await producer.send_and_wait(settings.otlp_topic, record)
        finally:
            await producer.stop()
        deadline = time.monotonic() + 120
        while len(traces := await read_models(run, "traces", Trace)) < RUNS:
            run.check_alive()
            assert time.monotonic() < deadline, f"{len(traces)} of {RUNS} traces"
            await asyncio.sleep(0.5)
        versions = await run.wait_for_lineage(learned_ids(traces, RedactionConfig.from_settings(settings)),
                                              timeout_s=120)
        dead = await run.dead_letters()
    _check(traces, versions, dead, runs, RedactionConfig.from_settings(settings))


async def test_the_receiver_answers_503_with_the_reason_while_nothing_ingests(kafka, unique_prefix):
    settings = run_settings(unique_prefix, otlp_topic=f"{unique_prefix}otlp_spans", otlp_receiver_port=0)
    async with serving_receiver(settings, kafka) as served, aiohttp.ClientSession() as http, http.post(
            served.url, data=b"{}", headers={"Content-Type": "application/json"}) as answer:
        assert answer.status == 503 and answer.headers["Retry-After"] == "5"
        reason = await answer.text()
    counters = served.counters
    assert f"consumer group {unique_prefix}default.ingest-otlp has no member" in reason
    assert "combee worker --otlp" in reason and counters["otlp_receiver_status_503"] == 1
