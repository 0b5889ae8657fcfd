"""Worker metrics without a broker: counter names, LLM call series, the /metrics route."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from combee_core.models import CallRecord, Usage
from streams.topology.health import HealthServer, WorkerReadiness
from streams.topology.metrics import WorkerMetrics, split_counter


def _call(role: str, *, error: str | None = None) -> CallRecord:
    return CallRecord(role=role, model="m", key="k", messages=[], params={}, items_read=1, attempt=1, error=error,
                      usage=Usage(prompt_tokens=10, completion_tokens=5, cost_usd=0.5, calls=1), latency_s=0.3)


def test_counter_names_split_into_family_and_labels():
    assert split_counter("records_in.reflect") == ("records_in", ("reflect",))
    assert split_counter("dead_letters.reflect.JSON.Error") == ("dead_letters", ("reflect", "JSON.Error"))
    assert split_counter("dead_letters") is None
    assert split_counter("dead_letters.reflect") is None  # lacks its error_type
    assert split_counter("versions") is None
    assert split_counter("llm_calls.reflector") is None


def test_llm_calls_by_role_model_and_outcome_and_a_registry_per_worker():
    first, second = WorkerMetrics(WorkerReadiness()), WorkerMetrics(WorkerReadiness())
    first.observe_call(_call("reflector"))
    first.observe_call(_call("reflector", error="timeout"))
    text = asyncio.run(first.render()).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("combee_llm_calls_total", (("model", "m"), ("outcome", "ok"), ("role", "reflector")))] == 1
    assert samples[("combee_llm_calls_total", (("model", "m"), ("outcome", "error"), ("role", "reflector")))] == 1
    assert samples[("combee_llm_tokens_total", (("kind", "prompt"), ("model", "m"), ("role", "reflector")))] == 20
    assert samples[("combee_llm_cost_usd_total", (("model", "m"), ("role", "reflector")))] == 1.0
    assert samples[("combee_llm_call_latency_seconds_count", (("model", "m"), ("role", "reflector")))] == 2
    assert samples[("combee_worker_ready", ())] == 0
    assert "combee_llm_calls_total{" not in asyncio.run(second.render()).decode()


async def _request(port: int, line: str) -> tuple[int, bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{line}\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), timeout=5)
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


async def test_health_server_serves_metrics_as_text_and_refuses_other_methods():
    readiness = WorkerReadiness()
    metrics = WorkerMetrics(readiness)
    async with HealthServer(readiness.report, host="127.0.0.1", port=0, metrics=metrics.render) as server:
        status, head, body = await _request(server.port, "GET /metrics HTTP/1.1")
        assert status == 200 and b"Content-Type: text/plain" in head and b"combee_worker_ready 0.0" in body
        assert (await _request(server.port, "POST /metrics HTTP/1.1"))[0] == 405
        status, _, body = await _request(server.port, "GET /nope HTTP/1.1")
        assert status == 404 and b"/metrics" in body


async def test_a_failing_scrape_answers_500_and_the_server_keeps_serving():
    async def broken() -> bytes:
        raise RuntimeError("collector broke")

    readiness = WorkerReadiness()
    async with HealthServer(readiness.report, host="127.0.0.1", port=0, metrics=broken) as server:
        status, _, body = await _request(server.port, "GET /metrics HTTP/1.1")
        assert status == 500 and b"collector broke" in body
        assert (await _request(server.port, "GET /healthz HTTP/1.1"))[0] == 200
