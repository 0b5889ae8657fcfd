"""Scaling out under faults: 2-3 workers each running every stage, traces of 3 playbooks fed at a steady rate with
real-time simulated LLM latency, while workers join, are killed (-9), restarted (SIGTERM) or paused into zombies. Each
fault strikes at a condition, not after a fixed delay: more versions count than at the previous fault (the fleet made
progress since) and acknowledged traces are still on their way; the stream starts when the first workers are ready and
ends a short tail after the last fault. The invariants are checked from the topics: every trace in exactly
one version's lineage or a dead letter, versions contiguous, no version number or batch id with two contents."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence

import pytest

from streams.testing.fault_stream import Moments, SteadyStream
from streams.testing.worker_fleet import PROMPT_STOP_S, WorkerFleet, fleet_settings, wait_accounted
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOKS = ("alpha", "beta", "gamma")
RATE_PER_S = 3.0
"""About what 2 workers learn at load 10-20 (~3-5 traces/s measured, the version chain's pace with real-time latency):
traces stay in flight at every fault, and a faster stream only lengthens the drain (at 20/s, 612 traces were in
flight when the third worker joined; the file's CPU is mostly its workers' and the broker's time, not per trace)."""
MOST_PER_PLAYBOOK = 1000
"""The stream's most: 1000 s at RATE_PER_S. A run fails if its faults are not over by then."""
TAIL = 6
"""Traces sent after the last fault (2 s at RATE_PER_S): the fleet as the faults left it takes them as it recovers."""
MOMENT_S = 300.0
"""The longest wait for a moment to strike: first versions came after up to 58 s at load 50 (the durable kill tests);
five times that."""
SETTLE_S = 300.0
"""After the stream: measured ~20-60 s to drain on 2 cores; five times that before the test gives up."""

Faults = Callable[[WorkerFleet, Moments], Awaitable[None]]


def _fault_rng() -> random.Random:
    """A fresh seed per run (faults should vary), printed so a failing run can be repeated."""
    seed = random.randrange(1 << 30)
    print(f"fault seed {seed}")
    return random.Random(seed)


def _interleaved_traces():
    per_playbook = [make_traces(MOST_PER_PLAYBOOK, pb, seed=i) for i, pb in enumerate(PLAYBOOKS)]
    return [trace for group in zip(*per_playbook) for trace in group]


async def _run(kafka, prefix: str, tmp_path, first: Sequence[int], faults: Faults, *,
               fenced_writers: bool = False) -> None:
    """Start workers ``first`` and, once they are ready, the stream; apply ``faults``; send the tail, wait until every
    trace is accounted for and check the run."""
    settings = fleet_settings(prefix)
    fleet = WorkerFleet(kafka, prefix, tmp_path)
    stream = SteadyStream(settings, kafka, _interleaved_traces(), RATE_PER_S)
    moments = Moments(stream, MOMENT_S)
    feeding: asyncio.Task | None = None
    try:
        for number in first:
            fleet.start(number)
        for number in first:
            await fleet.wait_ready(number)
        feeding = asyncio.create_task(stream.run())
        await faults(fleet, moments)
        stream.stop_after(TAIL)
        await feeding
        audit = await wait_accounted(settings, kafka, fleet, stream.acknowledged, SETTLE_S)
    finally:
        if feeding is not None:
            feeding.cancel()
        fleet.stop_all()
    problems = audit.problems(fenced_writers=fenced_writers)
    assert not problems, f"{problems}\n{audit}\nmoments: {moments}\n{fleet.tail()}"
    assert len(stream.acknowledged) == stream.sent
    assert audit.learned + audit.dead_lettered == stream.sent, f"{audit}\nmoments: {moments}"
    assert set(audit.versions) == set(PLAYBOOKS)
    for number, code, stop_s, start_up in fleet.exits:
        if stop_s:  # a SIGTERM: a clean, prompt stop (PROMPT_STOP_S on a machine that is not overloaded; more as it is)
            assert code == 0 and stop_s < PROMPT_STOP_S + 2 * start_up, (number, code, stop_s, start_up)


async def test_workers_joining_mid_stream_lose_no_trace(kafka, unique_prefix, tmp_path):
    async def joins(fleet: WorkerFleet, moments: Moments) -> None:
        for number in (2, 3):
            await moments.next()
            fleet.start(number)
            moments.mark(f"worker {number} started")
            await fleet.wait_ready(number)

    await _run(kafka, unique_prefix, tmp_path, (1,), joins)


async def test_random_kill_9_and_restart_loses_no_trace(kafka, unique_prefix, tmp_path):
    rng = _fault_rng()

    async def kills(fleet: WorkerFleet, moments: Moments) -> None:
        for _ in range(2):
            await moments.next()
            victim = rng.choice(sorted(fleet.processes))
            fleet.kill(victim)
            moments.mark(f"worker {victim} killed")
            await asyncio.sleep(rng.uniform(0, 3))
            fleet.start(victim)

    await _run(kafka, unique_prefix, tmp_path, (1, 2), kills)


async def test_rolling_sigterm_restarts_lose_no_trace(kafka, unique_prefix, tmp_path):
    async def rolling(fleet: WorkerFleet, moments: Moments) -> None:
        for number in (1, 2):  # like a deployment's rolling update: the next one once this one is ready
            await moments.next()
            await asyncio.to_thread(fleet.terminate, number)
            moments.mark(f"worker {number} stopped")
            fleet.start(number)
            await fleet.wait_ready(number)

    await _run(kafka, unique_prefix, tmp_path, (1, 2), rolling)


async def test_paused_workers_waking_up_as_zombies_change_nothing_that_counts(kafka, unique_prefix, tmp_path):
    """SIGSTOP a worker past the session timeout (its partitions move), then SIGCONT: it finishes calls for
    partitions it no longer owns. Whatever it writes late must be void for every reader."""
    rng = _fault_rng()

    async def pauses(fleet: WorkerFleet, moments: Moments) -> None:
        for _ in range(2):
            await moments.next()
            victim = rng.choice(sorted(fleet.processes))
            fleet.pause(victim)
            moments.mark(f"worker {victim} paused")
            await asyncio.sleep(kafka.profile.session_timeout_ms / 1000 + rng.uniform(1, 4))
            fleet.resume(victim)

    await _run(kafka, unique_prefix, tmp_path, (1, 2), pauses, fenced_writers=True)
