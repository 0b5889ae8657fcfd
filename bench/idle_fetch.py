"""The idle back-off of the fetch wait on Tansu (``combee_core.partitions.fetch_wait``): what an idle worker and its
broker cost, and what the first record after a quiet spell pays, for each ceiling of ``tansu_idle_fetch_wait_ms``.

    python -m bench.idle_fetch [--ceilings 50,250,500] [--idle-s 30] [--quiet-s 10] [--samples 3]
                               [--out bench/results/idle_fetch.json]

A ceiling of 50 ms is the wait without back-off (the floor), i.e. the behaviour before it. For each ceiling, on the
embedded Tansu (one broker for all ceilings), with ``bench.throughput``'s run (a fresh namespace, one ``combee
worker`` with every stage, zero-latency simulator, warm-up traces first), the worker started with
``COMBEE_TANSU_IDLE_FETCH_WAIT_MS`` = the ceiling and this process's clients (the version follower, the one-hop
reader) with the same ceiling:

1. **Idle CPU**: CPU seconds (``/proc/PID/stat``) of the worker and of the broker over ``--idle-s`` while nothing is
   sent (the follower of this process is the only other client). Reported per 30 s.
2. **A version after a quiet spell** (``--samples`` times): after ``--quiet-s`` of silence, 4 traces of one new
   playbook; seconds from just before they are produced until the follower sees their version (includes the
   batcher's ``max_wait_s`` = 1 s: the batch of 4 closes on time, not on size).
3. **One hop after a quiet spell** (``--samples`` times): a reader (``TopicReader``, as the stages' views) follows a
   fresh one-partition topic; after ``--quiet-s`` of silence plus a random 0-1 s (seeded: the reader's held fetches
   repeat with the period of its wait, and a fixed quiet spell lands at the same phase of it every time) one record
   is produced; seconds from before the send until the reader yields it. ``--hops-only``: only this, no worker.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import time
import uuid
from pathlib import Path

from aiokafka import TopicPartition

from bench.common import machine, start_broker, write_results
from bench.throughput import Run
from combee_core.sim.task_suite import build_suite, train_traces
from streams.broker.admin import create_topics
from streams.topology.kafka_clients import start_producer
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import TopicReader


async def version_after_quiet(run: Run, quiet_s: float, sample: int) -> float:
    await asyncio.sleep(quiet_s)
    playbook = f"quiet{sample}"
    traces = train_traces(build_suite(seed=7), 4, playbook_ids=[playbook], run_seed=1000 + sample)
    seen = len(run.versions)
    started = time.monotonic()
    await produce_traces(run.settings, run.broker.bootstrap, run.broker.profile, traces)
    assert run.follower is not None
    await run.follower.wait_until(lambda: any(v.playbook_id == playbook for v in run.versions[seen:]), 120,
                                  f"a version of {playbook}")
    return time.monotonic() - started


async def hops_after_quiet(broker, quiet_s: float, samples: int) -> list[float]:
    topic = f"idlehop{uuid.uuid4().hex[:8]}"
    await create_topics(broker.bootstrap, {topic: 1}, connection=broker.profile.connection)
    producer = await start_producer(broker.bootstrap, broker.profile)
    stop = asyncio.Event()
    arrived: asyncio.Queue[float] = asyncio.Queue()
    async with TopicReader(broker.bootstrap, broker.profile, fetch_max_wait_ms=50) as reader:
        await reader.assign([TopicPartition(topic, 0)])

        async def follow() -> None:
            async for records in reader.follow(stop):
                for _ in records:
                    arrived.put_nowait(time.monotonic())

        follower = asyncio.create_task(follow())
        try:
            await producer.send_and_wait(topic, b"warm")
            await asyncio.wait_for(arrived.get(), 30)
            delays, rng = [], random.Random(40)
            for _ in range(samples):
                await asyncio.sleep(quiet_s + rng.random())
                started = time.monotonic()
                await producer.send_and_wait(topic, b"after a quiet spell")
                delays.append(await asyncio.wait_for(arrived.get(), 30) - started)
            return delays
        finally:
            stop.set()
            await follower
            await producer.stop()


async def measure(base, ceiling: int, idle_s: float, quiet_s: float, samples: int) -> dict:
    broker = dataclasses.replace(base, profile=base.profile.with_idle_fetch_wait(ceiling))
    run = Run(broker, 1)
    run.fleet.extra_env["COMBEE_TANSU_IDLE_FETCH_WAIT_MS"] = str(ceiling)
    async with run:
        await asyncio.sleep(2.0)  # the warm-up's last hops settle
        worker, tansu, started = run.worker_cpu_s(), run.broker_cpu_s(), time.monotonic()
        await asyncio.sleep(idle_s)
        elapsed = time.monotonic() - started
        per_30 = 30 / elapsed
        idle = {"worker_cpu_s_per_30s": (run.worker_cpu_s() - worker) * per_30,
                "broker_cpu_s_per_30s": (run.broker_cpu_s() - tansu) * per_30}
        versions = [await version_after_quiet(run, quiet_s, i) for i in range(samples)]
        hops = await hops_after_quiet(broker, quiet_s, samples)
    return {"ceiling_ms": ceiling, **idle, "version_after_quiet_s": versions, "hop_after_quiet_s": hops}


async def run_all(ceilings: list[int], idle_s: float, quiet_s: float, samples: int, hops_only: bool) -> list[dict]:
    base = start_broker()
    try:
        results = []
        for ceiling in ceilings:
            if hops_only:
                profile = base.profile.with_idle_fetch_wait(ceiling)
                hops = await hops_after_quiet(dataclasses.replace(base, profile=profile), quiet_s, samples)
                results.append({"ceiling_ms": ceiling, "hop_after_quiet_s": hops})
                print(f"ceiling {ceiling:4d} ms: after {quiet_s:.0f}-{quiet_s + 1:.0f} s quiet, one hop in "
                      f"{1000 * statistics.median(hops):.0f} ms (median; {', '.join(f'{1000 * v:.0f}' for v in hops)})",
                      flush=True)
                continue
            result = await measure(base, ceiling, idle_s, quiet_s, samples)
            results.append(result)
            print(f"ceiling {ceiling:4d} ms: idle worker {result['worker_cpu_s_per_30s']:.2f} CPU-s/30 s, "
                  f"Tansu {result['broker_cpu_s_per_30s']:.2f} CPU-s/30 s; after {quiet_s:.0f} s quiet: a version "
                  f"in {statistics.median(result['version_after_quiet_s']):.2f} s (median; "
                  f"{', '.join(f'{v:.2f}' for v in result['version_after_quiet_s'])}), one hop in "
                  f"{1000 * statistics.median(result['hop_after_quiet_s']):.0f} ms (median; "
                  f"{', '.join(f'{1000 * v:.0f}' for v in result['hop_after_quiet_s'])})", flush=True)
        return results
    finally:
        base.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ceilings", default="50,250,500")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--quiet-s", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--hops-only", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/idle_fetch.json"))
    args = parser.parse_args(argv)
    results = asyncio.run(run_all([int(c) for c in args.ceilings.split(",")], args.idle_s, args.quiet_s,
                                  args.samples, args.hops_only))
    write_results(args.out, {"machine": machine(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
