"""A steady stream of traces for fault tests, and the moment to strike. The stream is fed at a steady rate from when
the workers are ready until the faults are over (and a short tail after), so that every fault meets traces on their
way; a fault strikes at a condition, not after a fixed delay: a version that counts more than at the previous fault
(the pipeline made progress since) and acknowledged traces in no version and no dead letter yet (work in flight)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence

from combee_core.log_order import valid_versions
from combee_core.models import DeadLetter, PlaybookVersion, Trace
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.testing.broker_under_test import ResolvedBroker
from streams.topology.kafka_clients import start_producer
from streams.topology.topic_reader import read_topic

log = logging.getLogger(__name__)


class StreamExhausted(AssertionError):
    """Every trace prepared was sent before the test said the faults were over."""


class SteadyStream:
    """``traces`` produced in order at ``rate_per_s`` until :meth:`stop_after`; a trace counts as sent once the
    broker acknowledged it (:attr:`acknowledged`). ``traces`` is the most a run may send: running out of them before
    :meth:`stop_after` fails the run (:class:`StreamExhausted`)."""

    def __init__(self, settings: CombeeSettings, broker: ResolvedBroker, traces: Sequence[Trace],
                 rate_per_s: float) -> None:
        self.settings, self.broker, self.traces, self.rate_per_s = settings, broker, traces, rate_per_s
        self.acknowledged: set[str] = set()
        self.sent = 0
        self.end = len(traces)
        self._stopping = False

    def stop_after(self, more: int) -> None:
        """Send ``more`` traces, then stop."""
        self.end = min(self.end, self.sent + more)
        self._stopping = True

    def _acked(self, trace_id: str, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            self.acknowledged.add(trace_id)

    async def run(self) -> None:
        producer = await start_producer(self.broker.bootstrap, self.broker.profile)
        topic = self.settings.topic(Topic.TRACES)
        sends: list[asyncio.Future] = []
        started = time.monotonic()
        try:
            while self.sent < self.end:
                await asyncio.sleep(max(0.0, started + self.sent / self.rate_per_s - time.monotonic()))
                trace = self.traces[self.sent]
                self.sent += 1
                sends.append(await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode()))
                sends[-1].add_done_callback(functools.partial(self._acked, trace.trace_id))
            await asyncio.gather(*sends)  # the broker stays up in these runs: a failed send fails the run
        finally:
            await producer.stop()
        if not self._stopping:
            raise StreamExhausted(f"all {len(self.traces)} traces sent before the faults were over")


async def learned(settings: CombeeSettings, broker: ResolvedBroker) -> tuple[int, set[str]]:
    """How many versions count now, and the traces in one of them or in a dead letter."""
    versions = [PlaybookVersion.from_json_bytes(r.value)
                for r in await read_topic(broker.bootstrap, broker.profile, settings.topic(Topic.PLAYBOOK))]
    dead = [DeadLetter.from_json_bytes(r.value)
            for r in await read_topic(broker.bootstrap, broker.profile, settings.topic(Topic.DLQ))]
    counted = valid_versions(versions)
    return len(counted), {t for v in counted for t in v.lineage} | {d.trace_id for d in dead if d.trace_id}


class Moments:
    """When to strike: each :meth:`next` waits until more versions count than at the previous one and acknowledged
    traces are still on their way. Each moment is recorded (:attr:`marks`, for a failing test's message)."""

    def __init__(self, stream: SteadyStream, timeout_s: float) -> None:
        self.stream, self.timeout_s = stream, timeout_s
        self.versions = 0
        self.started = time.monotonic()
        self.marks: list[str] = []

    async def next(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.stream.sent >= len(self.stream.traces):
                raise StreamExhausted(f"all {len(self.stream.traces)} traces sent before the faults were over: {self}")
            versions, covered = await learned(self.stream.settings, self.stream.broker)
            in_flight = len(self.stream.acknowledged - covered)
            if versions > self.versions and in_flight:
                self.versions = versions
                self.mark(f"{versions} versions, {self.stream.sent} traces sent, {in_flight} in flight")
                return
            assert time.monotonic() < deadline, (
                f"no new version with traces in flight within {self.timeout_s} s ({versions} versions, "
                f"{in_flight} in flight); moments so far: {self}")
            await asyncio.sleep(0.5)

    def mark(self, what: str) -> None:
        self.marks.append(f"{time.monotonic() - self.started:.1f} s: {what}")
        log.info("%s", self.marks[-1])

    def __str__(self) -> str:
        return "; ".join(self.marks)
