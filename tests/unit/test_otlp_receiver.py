"""The OTLP/HTTP receiver as the specification says, with the broker replaced by a sink that records what would be
written: the real SDK exporter's requests accepted, one record per trace id, partial success, limits and
back-pressure answers with Retry-After."""

from __future__ import annotations

import asyncio
import gzip
import json

import aiohttp
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core.otlp.wire import decode_spans, encode_request
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from streams.ingest.otlp_receiver import OtlpReceiver
from streams.testing.otel_agent import export_request, run_agent, tracer_provider

RUNS = train_traces(build_suite(seed=7), 3, playbook_ids=("pb",), run_seed=5, agents=3)


def _settings(**values: object) -> CombeeSettings:
    return CombeeSettings.load(env={}, **{"otlp_receiver_port": 0, **values})


def _spans():
    exporter = InMemorySpanExporter()
    provider = tracer_provider(exporter)
    for run in RUNS:
        run_agent(provider, run)
    return exporter.get_finished_spans()


async def test_the_sdk_exporter_is_answered_200_and_each_trace_id_is_one_record():
    written: list[tuple[str, bytes]] = []

    async def sink(records):
        written.extend(records)

    async with OtlpReceiver(_settings(), sink) as receiver:
        for compression in (Compression.NoCompression, Compression.Gzip):
            exporter = OTLPSpanExporter(endpoint=receiver.url, compression=compression)
            assert await asyncio.to_thread(exporter.export, _spans()) == SpanExportResult.SUCCESS
    assert len(written) == 2 * len(RUNS)
    for key, record in written:
        spans = decode_spans(record, "otlp_proto")
        assert {span.trace_id for span in spans} == {key} and len(spans) == 3


async def test_json_bodies_and_partial_success_for_spans_with_invalid_ids():
    written: list[tuple[str, bytes]] = []

    async def sink(records):
        written.extend(records)

    document = json.loads(encode_request(export_request(_spans()), "otlp_json"))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = ""
    async with OtlpReceiver(_settings(), sink) as receiver, aiohttp.ClientSession() as http:
        async with http.post(receiver.url, data=json.dumps(document),
                             headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200 and response.content_type == "application/json"
            body = await response.json()
    assert body["partialSuccess"]["rejectedSpans"] == "1" and "invalid" in body["partialSuccess"]["errorMessage"]
    assert sum(len(decode_spans(record)) for _, record in written) == 3 * len(RUNS) - 1


async def test_limits_and_back_pressure_are_answered_as_the_specification_says():
    release = asyncio.Event()

    async def slow_sink(records):
        await release.wait()

    async def failing_sink(records):
        raise ConnectionError("broker away")

    body = encode_request(export_request(_spans()), "otlp_proto")
    proto = {"Content-Type": "application/x-protobuf"}
    async with aiohttp.ClientSession() as http:
        async with OtlpReceiver(_settings(otlp_max_body_bytes=2048, otlp_max_inflight=1), slow_sink) as receiver:
            async with http.post(receiver.url, data=body, headers=proto) as response:
                assert response.status == 413
            async with http.post(receiver.url, data=gzip.compress(body), headers={**proto,
                                 "Content-Encoding": "gzip"}) as response:
                assert response.status == 413  # the limit holds after decompression
            async with http.post(receiver.url, data=b"x", headers={"Content-Type": "text/plain"}) as response:
                assert response.status == 415
            async with http.post(receiver.url, data=b"\xff\xff", headers=proto) as response:
                assert response.status == 400
        async with OtlpReceiver(_settings(otlp_max_inflight=1), slow_sink) as receiver:
            first = asyncio.create_task(http.post(receiver.url, data=body, headers=proto))
            while receiver._inflight < 1:
                await asyncio.sleep(0.01)
            async with http.post(receiver.url, data=body, headers=proto) as response:
                assert response.status == 429 and response.headers["Retry-After"] == "1"
            release.set()
            async with await first as response:
                assert response.status == 200
                ExportTraceServiceResponse.FromString(await response.read())
        async with OtlpReceiver(_settings(), failing_sink) as receiver:
            async with http.post(receiver.url, data=body, headers=proto) as response:
                assert response.status == 503 and response.headers["Retry-After"] == "5"


async def test_while_no_ingest_consumes_the_topic_the_receiver_answers_503_and_writes_nothing():
    written: list[tuple[str, bytes]] = []

    async def sink(records):
        written.extend(records)

    body = encode_request(export_request(_spans()), "otlp_proto")
    headers = {"Content-Type": "application/x-protobuf"}
    settings = _settings(topic_prefix="t.", run_id="r1")
    async with OtlpReceiver(settings, sink) as receiver, aiohttp.ClientSession() as http:
        receiver.consumers = 0
        async with http.post(receiver.url, data=body, headers=headers) as answer:
            assert answer.status == 503 and answer.headers["Retry-After"] == "5"
            assert b"consumer group t.r1.ingest-otlp has no member" in await answer.read()
        receiver.consumers = 1
        async with http.post(receiver.url, data=body, headers=headers) as answer:
            assert answer.status == 200
    assert len(written) == len(RUNS)
