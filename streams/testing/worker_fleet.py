"""Worker processes for fault tests and benchmarks: start, kill -9, SIGTERM, pause and restart ``combee worker``
children, each with its own log file, while a feeder produces traces at a steady rate; then audit the run from its
topics (``combee_core.runs.audit``)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from combee_core.log_order import valid_versions
from combee_core.models import BatchManifest, CombeeModel, DeadLetter, PlaybookVersion, Trace
from combee_core.runs.audit import RunAudit, audit_run
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.child_process import stop_processes
from streams.testing.broker_under_test import ResolvedBroker
from streams.testing.loss_report import explain_missing
from streams.topology.kafka_clients import start_producer
from streams.topology.observe import collect_status
from streams.topology.topic_reader import read_topic

WORKER_SETTINGS = {
    "COMBEE_BATCH_SIZE": "20",
    "COMBEE_MAX_WAIT_S": "2",
    "COMBEE_PARTITIONS": "4",
    "COMBEE_SIM_CLOCK": "real",
    "COMBEE_SIM_TIME_SCALE": "0.25",
    "COMBEE_LOG_LEVEL": "INFO",
}
"""Real-time simulated latency (a call sleeps a quarter of its modelled time: ~0.1-1 s), so calls are in flight
whenever a worker joins, dies or stops."""
PROMPT_STOP_S = 10.0
"""A worker's stop after SIGTERM on a machine that is not overloaded (more as it is: :attr:`WorkerFleet.exits`)."""


def fleet_settings(prefix: str) -> CombeeSettings:
    env = {**WORKER_SETTINGS, "COMBEE_TOPIC_PREFIX": prefix}
    return CombeeSettings.load(env=env)


def start_up_s() -> float:
    """Seconds this machine takes now to start the command line (``combee --help``): how slow it is at this moment,
    the base of a deadline on what a process does under the same load (e.g. its stop after SIGTERM)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "streams.cli", "--help"], capture_output=True, check=True, timeout=120)
    return time.monotonic() - started


@dataclass
class WorkerFleet:
    """``combee worker`` processes (all stages) of one run; logs under ``log_dir``."""

    broker: ResolvedBroker
    prefix: str
    log_dir: Path
    processes: dict[int, subprocess.Popen] = field(default_factory=dict)
    exits: list[tuple[int, int, float, float]] = field(default_factory=list)
    """(worker number, exit code, seconds from SIGTERM to exit or 0.0, and then :func:`start_up_s` when that stop took
    :data:`PROMPT_STOP_S` or more, else 0.0)"""
    logs: dict[int, Path] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    """More ``COMBEE_*`` settings for the workers (over :data:`WORKER_SETTINGS`)."""
    command: tuple[str, ...] = ("-m", "streams.cli", "worker", "--health-port", "0")
    """What each worker runs, after the interpreter (a benchmark may run a variant, e.g. ``bench.direct_worker``)."""
    _starts: int = 0

    def start(self, number: int) -> None:
        self._starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMBEE_")}
        env.update(COMBEE_KAFKA_BOOTSTRAP=self.broker.bootstrap, COMBEE_BROKER_KIND=self.broker.profile.kind,
                   COMBEE_TOPIC_PREFIX=self.prefix, **{**WORKER_SETTINGS, **self.extra_env})
        log = open(self.log_dir / f"worker-{number}-{self._starts}.log", "wb")  # closed by the child
        self.processes[number] = subprocess.Popen([sys.executable, *self.command], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT)
        self.logs[number] = Path(log.name)
        log.close()

    async def wait_ready(self, number: int, timeout_s: float = 120.0) -> None:
        """Wait until the worker's ``/readyz`` answers 200 (as a rolling restart waits before the next one)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            port = re.search(rb"health on :(\d+)", self.logs[number].read_bytes())
            if port is not None and await _ready(int(port.group(1))):
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"worker {number} not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def kill(self, number: int) -> None:
        process = self.processes.pop(number)
        process.send_signal(signal.SIGKILL)
        self.exits.append((number, process.wait(timeout=10), 0.0, 0.0))

    def terminate(self, number: int, timeout_s: float = 30.0) -> None:
        process = self.processes.pop(number)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=timeout_s)
        stop_s = time.monotonic() - started
        # how slow the machine is (a process start: ~1 CPU-s) matters only to a stop that was not prompt
        self.exits.append((number, code, stop_s, start_up_s() if stop_s >= PROMPT_STOP_S else 0.0))

    def pause(self, number: int) -> None:
        """SIGSTOP: the worker freezes mid-work; after the session timeout its partitions move to the others."""
        self.processes[number].send_signal(signal.SIGSTOP)

    def resume(self, number: int) -> None:
        """SIGCONT: the worker wakes up as a zombie, finishing work for partitions it no longer owns."""
        self.processes[number].send_signal(signal.SIGCONT)

    def check_alive(self) -> None:
        for number, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"worker {number} exited with {process.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        newest = sorted(self.log_dir.glob("worker-*.log"), key=os.path.getmtime)[-2:]
        return "\n".join(f"== {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
                         for p in newest)

    def log_text(self, number: int) -> str:
        """The log of worker ``number``'s latest start."""
        return self.logs[number].read_text(errors="replace")

    def owned(self, number: int, stage: str) -> set[int]:
        """The partitions of ``stage``'s input that worker ``number`` says it owns now (its log's ``owns`` and
        ``released`` lines)."""
        owned: set[int] = set()
        for change, listed in re.findall(rf" {stage}: (owns|released) (.*)", self.log_text(number)):
            partitions = {int(p) for p in re.findall(r"\[(\d+)\]", listed)}
            owned = owned | partitions if change == "owns" else owned - partitions
        return owned

    def stop_all(self) -> None:
        stop_processes(self.processes.values(), timeout_s=20)
        self.processes.clear()


async def _ready(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
        await writer.drain()
        return (await reader.readline()).split(b" ")[1:2] == [b"200"]
    finally:
        writer.close()


async def feed(settings: CombeeSettings, broker: ResolvedBroker, traces: Sequence[Trace], rate_per_s: float) -> None:
    """Produce ``traces`` in order at a steady rate (in small bursts), waiting for the broker's acks."""
    producer = await start_producer(broker.bootstrap, broker.profile)
    topic = settings.topic(Topic.TRACES)
    started = time.monotonic()
    try:
        for number, trace in enumerate(traces):
            await asyncio.sleep(max(0.0, started + number / rate_per_s - time.monotonic()))
            await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def read_run(settings: CombeeSettings, broker: ResolvedBroker) -> tuple[list, list, list]:
    async def models(topic: str, model: type[CombeeModel]) -> list:
        records = await read_topic(broker.bootstrap, broker.profile, settings.topic(topic))
        return [model.from_json_bytes(record.value) for record in records]

    return (await models(Topic.PLAYBOOK, PlaybookVersion), await models(Topic.BATCHES, BatchManifest),
            await models(Topic.DLQ, DeadLetter))


class StagesBehind(AssertionError):
    """A stage the fleet runs still had input it had not committed at the deadline (one line: which, how many)."""


async def wait_accounted(settings: CombeeSettings, broker: ResolvedBroker, fleet: WorkerFleet, sent: set[str],
                         timeout_s: float) -> RunAudit:
    """Wait until every sent trace is in a version that counts or a dead letter, and every stage the fleet runs has
    committed all of its input (a stage writes what a record gives before it commits the record, so a late duplicate
    version or batch is in the topics by then); then audit the topics. A stage with input still not committed at
    the deadline fails the wait (:class:`StagesBehind`): the audit would read topics that are still changing, or the
    stage holds a record it will never acknowledge (the reducer kept a partial that came while its batch's version was
    being written, until 2026-11-30: every trace was accounted for, and the reduce group stayed 4-5 records behind)."""
    deadline = time.monotonic() + timeout_s
    while True:
        fleet.check_alive()
        versions, manifests, dead = await read_run(settings, broker)
        covered = {t for v in valid_versions(versions) for t in v.lineage} | {d.trace_id for d in dead}
        if sent <= covered or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    behind = await _wait_committed(settings, broker, fleet, deadline)
    if behind:
        raise StagesBehind(f"{timeout_s:.0f} s after the wait began, stage(s) still behind: " + ", ".join(
            f"{stage} has {count} record(s) of input not committed" for stage, count in sorted(behind.items())))
    audit = audit_run(sent, *await read_run(settings, broker))
    audit.explanation += await explain_missing(settings, broker, audit.missing)
    return audit


def fleet_stages(fleet: WorkerFleet) -> list[str]:
    """The stages the fleet's workers run (their ``--stages``, if given, that run under their settings)."""
    from streams.topology.worker import parse_stages, runnable

    command = list(fleet.command)
    asked = command[command.index("--stages") + 1] if "--stages" in command else None
    env = {**WORKER_SETTINGS, **fleet.extra_env, "COMBEE_TOPIC_PREFIX": fleet.prefix}
    return runnable(parse_stages(asked), CombeeSettings.load(env=env))[0]


async def _wait_committed(settings: CombeeSettings, broker: ResolvedBroker, fleet: WorkerFleet,
                          deadline: float) -> dict[str, int]:
    """Wait until no stage the fleet runs has input it has not committed (or the deadline); what is left then."""
    stages = fleet_stages(fleet)
    while True:
        fleet.check_alive()
        lag = (await collect_status(settings, broker.bootstrap, broker.profile)).lag
        behind = {stage: lag[stage] for stage in stages if lag.get(stage)}
        if not behind or time.monotonic() > deadline:
            return behind
        await asyncio.sleep(0.5)
