"""Prometheus metrics: ``combee worker --health-port`` serves /metrics with the stages' series after traces flowed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.broker.child_process import find_free_port
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import PipelineTimeout
from streams.topology.produce import produce_traces
from tests.integration.test_health import _get, _poll
from tests.integration.topology_support import env_without_combee, make_traces, run_settings

pytestmark = [pytest.mark.integration]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the exposition text."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def _scrape_until(port: int, process: subprocess.Popen, ready, deadline_s: float) -> dict:
    """Scrape /metrics until ``ready(samples)`` holds; returns the last samples."""
    deadline = time.monotonic() + deadline_s
    samples: dict = {}
    while time.monotonic() < deadline:
        assert process.poll() is None, f"worker exited early: {process.stderr.read()}"
        try:
            status, body = await _get(port, "/metrics")
        except TimeoutError:  # a scrape slower than _get's 5 s on a loaded machine (seen at load ~15): ask again
            continue
        assert status == 200, body
        samples = _samples(body.decode())
        if ready(samples):
            return samples
        await asyncio.sleep(0.5)
    raise PipelineTimeout(f"metrics never showed a version within {deadline_s} s: "
                          f"{sorted(k for k in samples if k[0].startswith('combee_'))[:40]}")


@pytest.mark.slow
async def test_worker_metrics_after_traces_flowed(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=20)
    port = find_free_port()
    env = env_without_combee(COMBEE_SIM_CLOCK="virtual", COMBEE_BATCH_SIZE="20", COMBEE_PARTITIONS="2",
                             COMBEE_MAX_WAIT_S="3")
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
         "--health-port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        status, _ = await _poll(port, "/readyz", 90, process)
        assert status == 200
        await produce_traces(settings, kafka.bootstrap, kafka.profile, make_traces(20, seed=31))
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:  # one record that is not JSON: a dead letter of the reflector
            await producer.send_and_wait(settings.topic("traces"), b"{not json", key=b"pb")
        finally:
            await producer.stop()
        samples = await _scrape_until(
            port, process,
            lambda s: (_value(s, "combee_playbook_version", playbook="pb") or 0) >= 1
            and (_value(s, "combee_stage_events_total", event="decisions") is not None
                 or (_value(s, "combee_records_in_total", stage="control") or 0) >= 1),
            deadline_s=120,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    assert returncode == 0, process.stderr.read()

    # records in and out per stage / topic
    assert _value(samples, "combee_records_in_total", stage="reflect") == 21
    assert _value(samples, "combee_records_in_total", stage="batch") == 20
    assert _value(samples, "combee_records_in_total", stage="aggregate") == 40  # p=2 copies of each reflection
    assert _value(samples, "combee_records_out_total", topic="reflections") == 20
    assert _value(samples, "combee_records_out_total", topic="shuffle") == 40
    assert _value(samples, "combee_records_out_total", topic="playbook") >= 1
    # dead letters by reason class
    dead = {dict(labels)["error_type"]: value for (name, labels), value in samples.items()
            if name == "combee_dead_letters_total" and dict(labels)["stage"] == "reflect"}
    assert sum(dead.values()) == 1, dead
    # LLM calls, tokens, cost, latency by role and model
    model = "combee-sim/default"
    assert _value(samples, "combee_llm_calls_total", role="reflector", model=model, outcome="ok") >= 20
    assert _value(samples, "combee_llm_calls_total", role="aggregator", model=model, outcome="ok") >= 1
    assert _value(samples, "combee_llm_tokens_total", role="reflector", model=model, kind="prompt") > 0
    assert _value(samples, "combee_llm_tokens_total", role="reflector", model=model, kind="completion") > 0
    assert _value(samples, "combee_llm_cost_usd_total", role="reflector", model=model) > 0
    latency_count = _value(samples, "combee_llm_call_latency_seconds_count", role="reflector", model=model)
    latency_sum = _value(samples, "combee_llm_call_latency_seconds_sum", role="reflector", model=model)
    assert latency_count >= 20 and latency_sum > 0
    # per playbook: version and batch size
    assert _value(samples, "combee_playbook_version", playbook="pb") >= 1
    assert _value(samples, "combee_playbook_entries", playbook="pb") >= 1
    assert _value(samples, "combee_playbook_batch_size", playbook="pb") == 20
    # rebalances, ownership, lag, liveness
    for stage, owned in (("reflect", 2), ("batch", 2), ("aggregate", 2), ("reduce", 2), ("control", 1)):
        assert _value(samples, "combee_partitions_acquired_total", stage=stage) >= owned, stage
        assert _value(samples, "combee_stage_assigned_partitions", stage=stage) == owned, stage
        assert _value(samples, "combee_stage_up", stage=stage) == 1, stage
        lag = _value(samples, "combee_stage_lag_records", stage=stage)
        assert lag is None or 0 <= lag <= 41, (stage, lag)
    assert _value(samples, "combee_stage_lag_records", stage="reflect") is not None
    assert _value(samples, "combee_stage_events_total", event="versions") >= 1
    assert _value(samples, "combee_worker_ready") == 1
