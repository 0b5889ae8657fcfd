"""Scaling out under faults: 2-3 workers each running every stage, traces of 3 playbooks fed at a steady rate with
real-time simulated LLM latency, while workers join, are killed (-9), restarted (SIGTERM) or paused into zombies. Each
fault strikes at a condition, not after a fixed delay: more versions count than at the previous fault (the fleet made
progress since) and acknowledged traces are still on their way; the stream starts when the first workers are ready and
ends a short tail after the last fault. The invariants are checked from the topics: every trace in exactly
one version's lineage or a dead letter, versions contiguous, no version number or batch id with two contents."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest

from combee_core.log_order import valid_manifests, valid_versions
from combee_core.topology import Topic
from streams.testing.fault_stream import Moments, SteadyStream
from streams.testing.worker_fleet import (
    PROMPT_STOP_S,
    StagesBehind,
    WorkerFleet,
    feed,
    fleet_settings,
    read_run,
    wait_accounted,
)
from streams.topology.kafka_clients import partition_for, start_producer
from streams.topology.topic_reader import read_topic
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
PAUSES = 2
"""Zombies per run: pauses until one of them wrote a numbered record late, at least this many."""
MOST_PAUSES = 5
"""At most this many pauses (a victim may have had no open batch: 0-3 records written late per pause seen)."""
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
    """SIGSTOP the worker that batches a playbook, keep it stopped until the others have taken its partitions over
    and written that playbook's next batch and version, then SIGCONT: it wakes up believing it still owns them and
    writes what it had in hand (an open batch's manifest, the next version from partials it fetches), each with a
    number already taken. Whatever it writes late must be void for every reader. Paused again until a zombie has
    written such a record (a run where none did proves nothing and fails)."""
    rng = _fault_rng()
    settings = fleet_settings(unique_prefix)
    late: list[int] = []

    async def pauses(fleet: WorkerFleet, moments: Moments) -> None:
        while len(late) < MOST_PAUSES and not (len(late) >= PAUSES and sum(late)):
            await moments.next()
            playbook = rng.choice(PLAYBOOKS)
            before, victim = await _batcher_of(fleet, partition_for(playbook, settings.partitions), settings, kafka)
            late.append(await _zombie(fleet, victim, playbook, before, moments, settings, kafka))
            print(f"pause {len(late)}: {moments.marks[-1]}")

    await _run(kafka, unique_prefix, tmp_path, (1, 2), pauses, fenced_writers=True)
    assert sum(late) > 0, f"no zombie wrote a numbered record late in {len(late)} pause(s): the test proved nothing"
    versions, manifests, _ = await read_run(settings, kafka)
    assert not (counted := _late_that_count(versions, manifests)), f"records of a number already taken count: {counted}"


async def test_a_stopped_stage_with_input_left_fails_the_wait_until_it_commits(kafka, unique_prefix, tmp_path):
    """The wait's strictness measured both ways on one run: with every trace accounted for, a partial written again
    while the worker is stopped (SIGSTOP) leaves the reduce stage one record behind, and the wait fails naming it;
    once the worker runs again its reducer acknowledges the redelivery and commits it, and the wait passes."""
    settings = fleet_settings(unique_prefix)
    fleet = WorkerFleet(kafka, unique_prefix, tmp_path)
    traces = make_traces(6, "alpha")
    sent = {trace.trace_id for trace in traces}
    try:
        fleet.start(1)
        await fleet.wait_ready(1)
        await feed(settings, kafka, traces, RATE_PER_S)
        assert not (await wait_accounted(settings, kafka, fleet, sent, SETTLE_S)).problems()
        fleet.pause(1)
        topic = settings.topic(Topic.PARTIALS)
        first = (await read_topic(kafka.bootstrap, kafka.profile, topic))[0]
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            await producer.send_and_wait(topic, first.value, key=first.key, partition=first.partition)
        finally:
            await producer.stop()
        with pytest.raises(StagesBehind, match=r"stage\(s\) still behind: reduce has 1 record\(s\) of input not"):
            await wait_accounted(settings, kafka, fleet, sent, 5.0)
        fleet.resume(1)
        assert not (await wait_accounted(settings, kafka, fleet, sent, SETTLE_S)).problems()
    finally:
        if 1 in fleet.processes:
            fleet.resume(1)  # a stopped process would sit out its SIGTERM
        fleet.stop_all()


def _late_that_count(versions: list, manifests: list) -> list[str]:
    """Records of a number already taken (a later record of a version or batch id in the log) that count by the
    reading rule every reader applies (``combee_core.log_order``)."""
    counted = {id(r) for r in [*valid_versions(versions), *valid_manifests(manifests)]}
    written: dict[tuple[str, str, int], list] = {}
    for kind, number, records in (("v", "version", versions), ("batch ", "batch_id", manifests)):
        for record in records:
            written.setdefault((kind, record.playbook_id, getattr(record, number)), []).append(record)
    return [f"{pb} {kind}{n}: record {i + 1} of {len(rs)}" for (kind, pb, n), rs in sorted(written.items())
            for i, r in enumerate(rs) if i and id(r) in counted]


@dataclass(frozen=True)
class _Numbers:
    """Per playbook, how many versions and batches count; and how many records took a number already taken."""

    versions: Counter[str]
    batches: Counter[str]
    written_twice: int

    def counted(self, playbook: str) -> str:
        return f"{self.versions[playbook]} versions, {self.batches[playbook]} batches"

    def took_over(self, before: _Numbers, playbook: str) -> bool:
        return self.versions[playbook] > before.versions[playbook] and self.batches[playbook] > before.batches[
            playbook]


async def _numbers(settings, kafka) -> _Numbers:
    versions, manifests, _ = await read_run(settings, kafka)
    numbers = [("v", v.playbook_id, v.version) for v in versions] + [("b", m.playbook_id, m.batch_id)
                                                                      for m in manifests]
    return _Numbers(Counter(v.playbook_id for v in valid_versions(versions)),
                    Counter(m.playbook_id for m in valid_manifests(manifests)), len(numbers) - len(set(numbers)))


async def _batcher_of(fleet: WorkerFleet, partition: int, settings, kafka) -> tuple[_Numbers, int]:
    """The numbers now and the worker whose batch stage owns ``partition`` (its open batches are what a zombie writes
    on waking: it closes them at once, their ``max_wait_s`` long past); waits while the partition is between
    owners."""
    deadline = time.monotonic() + MOMENT_S
    while True:
        before = await _numbers(settings, kafka)
        owner = next((n for n in sorted(fleet.processes) if partition in fleet.owned(n, "batch")), None)
        if owner is not None:
            return before, owner
        assert time.monotonic() < deadline, f"no worker's batch stage owned partition {partition} in {MOMENT_S:.0f} s"
        await asyncio.sleep(0.5)


async def _zombie(fleet: WorkerFleet, victim: int, playbook: str, before: _Numbers, moments: Moments, settings,
                  kafka) -> int:
    """Pause ``victim`` (it batches ``playbook`` now) until the others have written ``playbook``'s next batch and
    version and the session timed out, then wake it; once its batch stage has noticed the rebalance (it released or
    took partitions): how many records it wrote late."""
    noticed = len(_BATCHER_CHANGES.findall(fleet.log_text(victim)))
    paused_at = time.monotonic()
    fleet.pause(victim)
    moments.mark(f"worker {victim} paused (batches {playbook}: {before.counted(playbook)})")
    await _until(lambda now: now.took_over(before, playbook)
                 and time.monotonic() - paused_at > kafka.profile.session_timeout_ms / 1000,
                 settings, kafka, f"the others taking over {playbook} from worker {victim}")
    fleet.resume(victim)
    await _until(lambda _: len(_BATCHER_CHANGES.findall(fleet.log_text(victim))) > noticed, settings, kafka,
                 f"worker {victim} noticing the rebalance")  # what it wrote before is acknowledged by then
    late = (await _numbers(settings, kafka)).written_twice - before.written_twice
    moments.mark(f"worker {victim} woke up after {time.monotonic() - paused_at:.0f} s: {late} numbered record(s) "
                 "written late")
    return late


_BATCHER_CHANGES = re.compile(r" batch: (?:released|owns) ")


async def _until(condition: Callable[[_Numbers], bool], settings, kafka, what: str) -> _Numbers:
    deadline = time.monotonic() + MOMENT_S
    while True:
        now = await _numbers(settings, kafka)
        if condition(now):
            return now
        assert time.monotonic() < deadline, f"no {what} within {MOMENT_S:.0f} s"
        await asyncio.sleep(0.5)
