"""Operator commands on a real broker: `combee dlq` lists, filters and gives back dead letters; promote and
rollback errors; `combee diff` finds the recorded broker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from tests.integration.topology_support import env_without_combee, make_traces, run_settings

pytestmark = [pytest.mark.integration]

BAD_JSON = b'{"trace_id": "bad-1", oops'
BAD_SCHEMA = b'{"trace_id": "bad-2", "playbook_id": "pb"}'


async def _dlq(*args: str) -> tuple[int, bytes, str]:
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", "dlq", *args,
                                                   env=env_without_combee(), stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out, err.decode()


async def test_dlq_lists_filters_and_gives_back_the_original_bytes(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=5, partitions=1)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("reflect",)) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            for value in (BAD_JSON, make_traces(1)[0].to_json_bytes(), BAD_SCHEMA):
                await producer.send_and_wait(settings.topic("traces"), value, key=b"pb")
        finally:
            await producer.stop()
        deadline = asyncio.get_running_loop().time() + 60
        while len(await run.dead_letters()) < 2 and asyncio.get_running_loop().time() < deadline:
            run.check_alive()
            await asyncio.sleep(0.3)
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)

    code, out, err = await _dlq(*common)
    assert code == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 2 and all(" reflect TraceRejected " in line for line in lines), lines
    assert "invalid JSON" in lines[0] and "trace=bad-2" in lines[1] and "agent_id" in lines[1]
    assert "2 of 2 dead letter(s)" in err and "reflect TraceRejected 2" in err

    code, out, err = await _dlq(*common, "--stage", "reflect", "--reason", "invalid json", "--raw")
    assert code == 0, err
    assert out == BAD_JSON + b"\n"  # the bytes as produced: fix them and produce again

    code, out, err = await _dlq(*common, "--error-type", "TraceRejected", "--limit", "1", "--json")
    assert code == 0, err
    [letter] = [json.loads(line) for line in out.decode().splitlines()]
    assert letter["trace_id"] == "bad-2" and "the newest 1 shown" in err

    code, out, err = await _dlq(*common, "--stage", "batch")
    assert code == 0 and out == b"" and "0 of 2" in err
    code, _, err = await _dlq(*common, "--stage", "nosuch")
    assert code == 2 and "no stage 'nosuch'" in err


async def test_promote_and_rollback_errors_are_one_line_and_exit_2(kafka, unique_prefix):
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    for command in (("promote", "nosuch", "1"), ("rollback", "nosuch", "--to", "3")):
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", *command, *common,
                                                       env=env_without_combee(), stdout=subprocess.PIPE,
                                                       stderr=subprocess.PIPE)
        _, err = await asyncio.wait_for(process.communicate(), 60)
        text = err.decode()
        assert process.returncode == 2, text
        assert text.startswith(f"combee {command[0]}: nosuch has no version") and "versions 1..0" not in text
        assert "it has no versions on the playbook topic" in text and text.count("\n") == 1


async def test_diff_of_topic_prefixes_uses_the_broker_combee_broker_recorded(kafka, unique_prefix, tmp_path):
    from streams.broker.state import STATE_DIR_ENV, BrokerRecord, record_path, write_record

    env = env_without_combee(**{STATE_DIR_ENV: str(tmp_path)})
    write_record(BrokerRecord.now(kafka.bootstrap, "memory://tansu/", pid=os.getpid()),
                 record_path({STATE_DIR_ENV: str(tmp_path)}))  # this process stands in for `combee broker`
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", "diff", f"{unique_prefix}a.",
                                                   f"{unique_prefix}b.", env=env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    text = err.decode()
    assert f"Using the broker at {kafka.bootstrap}" in text, text
    assert process.returncode == 2 and "no playbook versions found" in text and "--bootstrap" not in text


async def test_combee_broker_says_it_is_stopping_and_stops_within_its_grace_with_a_worker_attached(tmp_path):
    import signal
    import threading
    import time

    env = env_without_combee(COMBEE_STATE_DIR=str(tmp_path))
    broker = subprocess.Popen([sys.executable, "-m", "streams.cli", "broker", "--memory"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[tuple[float, str]] = []  # the broker's stderr lines, each with the moment this test read it

    def read_said() -> None:
        for line in broker.stderr:
            said.append((time.monotonic(), line))

    reader = threading.Thread(target=read_said, daemon=True)
    reader.start()
    worker = None
    try:
        bootstrap = (await asyncio.to_thread(broker.stdout.readline)).strip()
        worker = subprocess.Popen([sys.executable, "-m", "streams.cli", "worker", "--bootstrap", bootstrap,
                                   "--stages", "reflect"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)

        def ready() -> None:
            while "worker: ready" not in (line := worker.stderr.readline()):
                assert line, "the worker exited before it was ready"

        # Ends on the condition; the most a process's start gets (15-30 s of wall at load 23-38).
        await asyncio.wait_for(asyncio.to_thread(ready), 120)
        broker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(broker.wait, 30)
    finally:
        for process in (worker, broker):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.to_thread(process.wait, 30)
    await asyncio.to_thread(reader.join, 30)
    err = "".join(line for _, line in said)
    assert code == 0 and "(up to 2 s while clients are connected)" in err and "Broker stopped.\n" in err, err
    [stopping] = [at for at, line in said if line.startswith("Stopping the broker at")]
    [stopped] = [at for at, line in said if line == "Broker stopped.\n"]
    # Its grace is what it promises: from saying it stops to saying it stopped, Tansu (a client attached, so it does
    # not stop at SIGTERM) gets 2 s, then SIGKILL. The bound is the grace it must not wait in memory (5 s, the stored
    # one; a silent ~7 s before): the 3 s beyond the 2 are for the kill, the reaping and two lines (0.01-0.02 s at
    # load 9-10, the broker at nice 19). Not timed: the signal's way to its loop and the interpreter's exit, seconds
    # at load 25-35 (the whole took 6.2 s once), bounded by the 30 s wait above.
    assert stopped - stopping < 5.0, f"{stopped - stopping:.2f} s from 'Stopping the broker' to 'Broker stopped.'"
