"""Worker health endpoints: ``combee worker --health-port`` answers /healthz and /readyz on a real broker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from streams.broker.child_process import find_free_port
from streams.topology.health import HealthServer, WorkerReadiness
from tests.integration.durable_support import START_S  # the most a wait on a process's start gets
from tests.integration.topology_support import env_without_combee

pytestmark = [pytest.mark.integration]


async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), timeout=5)
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def _poll(port: int, path: str, deadline_s: float, process: subprocess.Popen) -> tuple[int, bytes]:
    """GET until 200; returns the last answer (or raises when nothing ever listened)."""
    deadline = time.monotonic() + deadline_s
    last: tuple[int, bytes] | None = None
    while time.monotonic() < deadline:
        assert process.poll() is None, f"worker exited early: {process.stderr.read()}"
        try:
            last = await _get(port, path)
        except (ConnectionError, OSError):
            last = None
        if last is not None and last[0] == 200:
            return last
        await asyncio.sleep(0.2)
    assert last is not None, f"nothing answered on port {port} within {deadline_s} s"
    return last


async def test_health_server_answers_404_and_503_until_ready():
    readiness = WorkerReadiness()
    async with HealthServer(readiness.report, host="127.0.0.1", port=0) as server:
        assert (await _get(server.port, "/healthz"))[0] == 200
        status, body = await _get(server.port, "/readyz")
        assert status == 503 and b"not ready" in body  # no stage has started
        assert (await _get(server.port, "/metrics"))[0] == 404


@pytest.mark.slow
async def _stderr_until(process: subprocess.Popen, text: str, timeout_s: float) -> str:
    """Lines of the process's stderr up to the first that holds ``text``; AssertionError after ``timeout_s``."""
    seen: list[str] = []

    def read() -> None:
        while not seen or text not in seen[-1]:
            line = process.stderr.readline()
            if not line:
                return
            seen.append(line)

    await asyncio.wait_for(asyncio.to_thread(read), timeout_s)
    assert seen and text in seen[-1], "".join(seen)
    return "".join(seen)


async def test_worker_with_health_port_is_alive_then_ready_and_stops_on_sigterm(kafka, unique_prefix):
    port = find_free_port()
    env = env_without_combee()
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
         "--health-port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        # Timed from the door's opening, which the worker says on stderr once its port is bound (first thing after
        # its imports): the interpreter's start before it took 30 s and more at load 25-35, and 30 s from the spawn
        # failed the suite so. That start gets the most a process's start gets, ending on the line; the door then
        # answered in 0.01-0.02 s at load 11.
        await _stderr_until(process, f"worker: health on :{port} ", START_S)
        status, body = await _poll(port, "/healthz", 30, process)
        assert status == 200 and b"alive" in body
        status, body = await _poll(port, "/readyz", START_S, process)  # the rest of its start: topics, groups
        assert status == 200, body
        for stage in ("reflect", "batch", "aggregate", "reduce", "control"):
            assert f'"{stage}":"consuming"'.encode() in body
        # The worker says so on stderr too, once (for whoever runs it without a probe).
        seen = await _stderr_until(process, "worker: ready", 30)
        assert "worker: ready (reflect, batch, aggregate, reduce, control, guard)" in seen
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    assert returncode == 0, process.stderr.read()
