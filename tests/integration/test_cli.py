"""The command line against a real broker: broker, produce, tail, status."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streams.broker.probe import wait_for_broker
from streams.topology.pipeline import InProcessPipeline
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import env_without_combee, make_traces, run_settings

pytestmark = [pytest.mark.integration]

COMBEE = [sys.executable, "-m", "streams.cli"]


async def _combee(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *COMBEE, *args, env=env or env_without_combee(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode, out.decode(), err.decode()


async def test_broker_command_prints_a_bootstrap_that_answers_and_stops_on_sigterm():
    process = subprocess.Popen([*COMBEE, "broker", "--memory"], env=env_without_combee(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = (await asyncio.to_thread(process.stdout.readline)).strip()
        assert bootstrap.startswith("127.0.0.1:")
        await wait_for_broker(bootstrap, timeout_s=20)
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)
    assert returncode == 0
    assert "memory only" in process.stderr.read()


@pytest.mark.slow
async def test_produce_tail_and_status_on_a_running_pipeline(kafka, unique_prefix, tmp_path: Path):
    settings = run_settings(unique_prefix, batch_size=20)
    traces = make_traces(20, seed=11)
    jsonl = tmp_path / "traces.jsonl"
    jsonl.write_text("".join(t.to_json_bytes().decode() + "\n" for t in traces))
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        code, _, err = await _combee("produce", str(jsonl), *common)
        assert code == 0, err
        assert "sent 20 trace(s)" in err
        await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=60)
        code, out, err = await _combee("tail", "--max-versions", "1", *common)
        assert code == 0, err
        assert out.startswith("pb v1 (parent v0, batch 0)")
        assert "following every candidate version" in err and "pass --promotion" in err  # the mode is said
        assert "20 traces" in out and "\n  + [" in out
        await asyncio.sleep(settings.max_wait_s)  # let every stage commit its offsets (ticks every 0.25 s)
        code, out, err = await _combee("status", *common)
    assert code == 0, err
    assert re.search(rf"{re.escape(unique_prefix)}traces\s+2 partition\(s\)\s+20 records", out), out
    assert re.search(rf"{re.escape(unique_prefix)}shuffle\s+2 partition\(s\)\s+40 records", out), out
    assert "pb" in out and "version 1" in out and "batch size 20" in out
    assert "reflect    0" in out and "dead letters: 0" in out


async def test_produce_sends_the_valid_lines_reports_the_invalid_one_and_exits_1_or_with_strict_sends_nothing(
        kafka, unique_prefix, tmp_path: Path):
    """The same behaviour as the example producers (examples/README.md)."""
    traces = make_traces(3, seed=12)
    lines = [traces[0].to_json_bytes().decode(), '{"trace_id": "x"}', traces[1].to_json_bytes().decode()]
    jsonl = tmp_path / "traces.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    code, _, err = await _combee("produce", str(jsonl), "--strict", *common)
    assert code == 1
    assert "line 2: does not match the Trace schema v1" in err and "nothing sent (--strict)" in err
    assert await read_topic(kafka.bootstrap, kafka.profile, f"{unique_prefix}traces") == []
    code, _, err = await _combee("produce", str(jsonl), *common)
    assert code == 1
    assert "line 2: does not match the Trace schema v1" in err and "sent 2 trace(s)" in err and "rejected 1" in err
    sent = await read_topic(kafka.bootstrap, kafka.profile, f"{unique_prefix}traces")
    assert [record.value for record in sent] == [traces[0].to_json_bytes(), traces[1].to_json_bytes()]
