"""The durable `combee broker` as the kill tests (test_durable_broker_kills.py) drive it: a child process on a
chosen state directory and port, killed with SIGKILL and started again; the time of each phase of a test."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from streams.broker.seaweed import port_free
from streams.broker.state import BrokerRecord, process_alive
from tests.integration.topology_support import env_without_combee

START_S = 120.0
"""`combee broker` started (storage, then Tansu) in 3-6 s on 2 cores, up to 25 s with other tests running."""


class DurableService:
    """`combee broker` (durable) on one state directory and Kafka port, as a child process: start, kill -9 every
    process of it, restart."""

    def __init__(self, state: Path, log_dir: Path, port: int) -> None:
        self.state, self.log_dir, self.port = state, log_dir, port
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.starts += 1
        env = env_without_combee(COMBEE_STATE_DIR=str(self.state))
        err = open(self.log_dir / f"broker-{self.starts}.err", "wb")  # closed by the child
        self.process = subprocess.Popen([sys.executable, "-m", "streams.cli", "broker", "--port", str(self.port)],
                                        env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), START_S)
        assert line.strip() == self.bootstrap, f"combee broker said {line!r}: {self.stderr()}"

    def stderr(self) -> str:
        return (self.log_dir / f"broker-{self.starts}.err").read_text(errors="replace")

    def record(self) -> BrokerRecord:
        return BrokerRecord.model_validate_json((self.state / "broker.json").read_bytes())

    async def kill_all(self) -> None:
        """SIGKILL the supervisor, Tansu and SeaweedFS at once, and wait until none runs."""
        assert self.process is not None
        pids = [self.process.pid, *self.record().child_pids.values()]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        await until(lambda: not any(process_alive(pid) for pid in pids), 20, "the killed processes to be gone")

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None


class Phases:
    """Seconds from the test's start at which each phase ended (logged, and in a failing assertion's message)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, what: str) -> None:
        self.marks.append((what, time.monotonic() - self.started))
        logging.getLogger(__name__).info("%.1f s: %s", self.marks[-1][1], what)

    def __str__(self) -> str:
        return ", ".join(f"{what} {at:.1f} s" for what, at in self.marks)


async def until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        await asyncio.sleep(0.1)


def port_below_the_ephemeral_range(rng: random.Random) -> int:
    """A free port below the kernel's range for the client ends of connections (Linux's ip_local_port_range), so
    that nothing takes it while the broker is down or still starting: a client's own end of a connection may get any
    port in that range, and a worker reconnecting to a port there can even connect to itself (seen once from
    ``find_free_port``: Tansu failed with "Address in use")."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    for _ in range(100):
        port = rng.randrange(10000, low)
        if port_free("127.0.0.1", port):
            return port
    raise AssertionError(f"no free port found in 10000-{low}")
