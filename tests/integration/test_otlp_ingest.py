"""OpenTelemetry in, playbook versions out, on the real broker: a toy agent instrumented with the OpenTelemetry SDK
(GenAI conventions) exporting OTLP/HTTP to ``combee otlp-receiver``'s server, and the same kind of spans written to
the OTLP topic as the Collector's Kafka exporter writes them (``otlp_proto`` and ``otlp_json``, one record per batch
of spans), both become traces and then a playbook version through the ingest-otlp stage. The runs' OTel ids are
seeded; a trace is learned under its id as the reflector's redaction leaves it (``learned_ids``)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core.ingest.redaction import RedactionConfig
from combee_core.models import Trace
from combee_core.otlp.wire import decode_spans, encode_request
from combee_core.sim.task_suite import build_suite, train_traces
from streams.testing.otel_agent import SeededIds, export_request, report_evaluation, run_agent, tracer_provider
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.topic_reader import read_topic
from tests.integration.test_otlp_openinference_doors import learned_ids
from tests.integration.topology_support import env_without_combee, run_settings, serving_receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNS = 12


FEEDBACK_WAIT_S = 60.0
"""How long a finished run waits for its evaluation. The late evaluation is sent once the stage counts the run as
waiting (not after a fixed pause), so the window only has to cover one export through the receiver and the broker
(well under a second idle; it was over 3 s at load, when a 3 s window let the run go on without it): a run that gets
its evaluation leaves at once, so the width costs nothing, and a join that never happens still fails the test."""


def _settings(prefix: str):
    return run_settings(prefix, otlp_ingest=True, otlp_topic=f"{prefix}otlp_spans", otlp_idle_s=1.0,
                        otlp_feedback_wait_s=FEEDBACK_WAIT_S, batch_size=RUNS, max_wait_s=2.0, otlp_receiver_port=0)


def _runs(playbook: str, seed: int = 1):
    return train_traces(build_suite(seed=7), RUNS, playbook_ids=(playbook,), run_seed=seed, agents=4)


async def _learned(run: InProcessPipeline, count: int, timeout_s: float = 90.0) -> tuple[list[Trace], list]:
    """Wait for ``count`` traces on the traces topic, then until each is in a version's lineage."""
    deadline = time.monotonic() + timeout_s
    while len(traces := await read_models(run, "traces", Trace)) < count:
        run.check_alive()
        assert time.monotonic() < deadline, f"{len(traces)} of {count} traces after {timeout_s:.0f} s"
        await asyncio.sleep(0.5)
    redaction = RedactionConfig.from_settings(run.settings)
    versions = await run.wait_for_lineage(learned_ids(traces, redaction), timeout_s=timeout_s)
    return traces, versions


async def test_a_toy_agent_exporting_otlp_http_to_the_receiver_makes_a_playbook_version(kafka, unique_prefix):
    settings = _settings(unique_prefix)
    runs = _runs("otel-http")
    async with (InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=["ingest-otlp", "reflect", "batch",
                                                                                   "aggregate", "reduce"]) as run,
                serving_receiver(settings, kafka) as served):
        exporter = OTLPSpanExporter(endpoint=served.url)
        provider = tracer_provider(exporter, id_generator=SeededIds(seed=1))
        late = runs[-1]

        def agent():  # the SDK exports synchronously (SimpleSpanProcessor): off the event loop
            for simulated in runs[:-1]:
                run_agent(provider, simulated, used_entries=("e0",))
            return run_agent(provider, late, evaluate=False)

        def evaluator_then_agent(context) -> None:
            report_evaluation(provider, context, late)
            silent = _runs("otel-http", seed=9)[0]
            run_agent(provider, silent, capture_content=False)

        context = await asyncio.to_thread(agent)
        # The evaluator scores the run after it ended (a delayed-feedback join): once the stage holds it, finished
        # and waiting for its evaluation.
        await run.wait_counter("otlp_runs_waiting_for_feedback", 1, timeout_s=FEEDBACK_WAIT_S)
        await asyncio.to_thread(evaluator_then_agent, context)
        assert await asyncio.to_thread(exporter.export, []) == SpanExportResult.SUCCESS
        traces, versions = await _learned(run, RUNS)
        dead = await run.dead_letters()
    counters = served.counters
    # one record per trace id per request (the SDK here exports each span as it ends; the last request is empty)
    assert counters["otlp_receiver_records"] == counters["otlp_receiver_requests"] - 1 == 3 * (RUNS + 1) + 1
    assert len(traces) == RUNS and len({t.trace_id for t in traces}) == RUNS
    assert all(t.metadata["used_entries"] == "e0" for t in traces if t.task_id != late.task_id)
    [joined] = [t for t in traces if t.task_id == late.task_id]
    assert joined.metadata["otlp.feedback"].startswith("joined after") and joined.feedback, joined.metadata
    assert run.counters["otlp_runs_waiting_for_feedback"] >= 1 and "otlp_traces_without_feedback" not in run.counters
    assert [d.stage for d in dead if "content capture is off" in d.reason] == ["ingest-otlp"]
    learned = learned_ids(traces, RedactionConfig.from_settings(settings))
    assert Counter(t for v in versions for t in v.lineage) == dict.fromkeys(learned, 1) and len(learned) == RUNS
    assert any(op.outcome == "applied" for v in versions for op in v.operations) and versions[-1].entries


async def test_collector_kafka_records_in_otlp_proto_and_otlp_json_make_playbook_versions(kafka, unique_prefix):
    settings = _settings(unique_prefix)
    records: list[bytes] = []
    expected: dict[str, set[str]] = {}
    for seed, (encoding, playbook) in enumerate((("otlp_proto", "otel-proto"), ("otlp_json", "otel-json")), 1):
        exporter = InMemorySpanExporter()
        provider = tracer_provider(exporter, id_generator=SeededIds(seed))
        for simulated in _runs(playbook):
            run_agent(provider, simulated)
        spans = exporter.get_finished_spans()
        expected[playbook] = {f"otel:{span.context.trace_id:032x}" for span in spans}
        # batches of 5 spans: a record holds parts of several runs, as the Collector's batch processor makes them
        records += [encode_request(export_request(spans[i:i + 5]), encoding) for i in range(0, len(spans), 5)]
    records.append(records[0])  # an exporter retry: the same batch again
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=["ingest-otlp", "reflect", "batch",
                                                                                  "aggregate", "reduce"]) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            for record in records:  # unkeyed, as the Collector's exporter writes by default
                await producer.send_and_wait(settings.otlp_topic, record)
        finally:
            await producer.stop()
        traces, versions = await _learned(run, 2 * RUNS)
    by_playbook = Counter(t.playbook_id for t in traces)
    assert by_playbook == {"otel-proto": RUNS, "otel-json": RUNS}
    for playbook, trace_ids in expected.items():
        assert {t.trace_id for t in traces if t.playbook_id == playbook} == trace_ids
        assert {t for v in versions if v.playbook_id == playbook for t in v.lineage} == learned_ids(
            [t for t in traces if t.playbook_id == playbook], RedactionConfig.from_settings(settings))
        assert any(v.entries for v in versions if v.playbook_id == playbook)
    assert all(t.metadata["otlp.feedback"] == "with-run" and t.feedback for t in traces)


async def test_the_receiver_command_writes_otlp_http_to_the_topic_and_stops_on_sigterm(kafka, unique_prefix):
    topic = f"{unique_prefix}otlp_spans"
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "otlp-receiver", "--bootstrap", kafka.bootstrap, "--port", "0",
         "--otlp-topic", topic, "--no-require-ingest"], env=env_without_combee(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while not line.startswith("otlp-receiver: http://127.0.0.1:"):
            line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 60)
            assert line, "the receiver exited before serving"
        url = line.split()[1]
        exporter = InMemorySpanExporter()
        run_agent(tracer_provider(exporter), _runs("cli")[0])
        body = encode_request(export_request(exporter.get_finished_spans()), "otlp_proto")
        async with aiohttp.ClientSession() as http, http.post(
                url, data=body, headers={"Content-Type": "application/x-protobuf"}) as response:
            assert response.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 20)
    assert returncode == 0 and "otlp_receiver_records': 1" in process.stderr.read()
    [record] = await read_topic(kafka.bootstrap, kafka.profile, topic)
    assert decode_spans(record.value)[0].trace_id == record.key.decode()


async def test_the_receiver_answers_429_while_the_ingest_stage_lags_behind(kafka, unique_prefix):
    settings = run_settings(unique_prefix, otlp_topic=f"{unique_prefix}otlp_spans", otlp_receiver_port=0,
                            otlp_max_lag=2, otlp_require_ingest=False)  # no ingest-otlp: nothing consumes the topic
    async with serving_receiver(settings, kafka) as served:
        exporter = InMemorySpanExporter()
        run_agent(tracer_provider(exporter), _runs("lag")[0])
        body = encode_request(export_request(exporter.get_finished_spans()), "otlp_proto")
        headers = {"Content-Type": "application/x-protobuf"}
        async with aiohttp.ClientSession() as http:
            for _ in range(3):  # 3 records behind: over the bound of 2
                async with http.post(served.url, data=body, headers=headers) as response:
                    assert response.status == 200
            deadline = time.monotonic() + 30
            while (served.receiver.backlog or 0) <= 2:
                assert time.monotonic() < deadline, f"backlog {served.receiver.backlog} after 30 s"
                await asyncio.sleep(0.2)
            async with http.post(served.url, data=body, headers=headers) as response:
                assert response.status == 429 and response.headers["Retry-After"] == "1"
    counters = served.counters
    assert counters["otlp_receiver_status_429"] == 1 and counters["otlp_receiver_records"] == 3
