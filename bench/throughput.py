"""Streaming throughput with a zero-latency simulator: traces/s through all stages, end-to-end latency, RSS.

    python -m bench.throughput [--traces 2000] [--workers 1,2] [--profile] [--out bench/results]

For each worker count, a fresh run namespace: ``combee worker`` processes (all stages each; stages scale out as
consumer-group members) on the broker (``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded Tansu), then
``--traces`` traces produced as fast as the producer goes. Reported: traces/s from the first trace produced to
the version holding the last one; p50/p99 of (version published_at - the trace record's timestamp); peak RSS of
each worker (VmHWM). ``--profile`` also runs the topology in-process under cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.common import machine, start_broker, write_results
from combee_core.models import PlaybookVersion, Trace
from combee_core.settings import CombeeSettings
from combee_core.tasks import build_suite, train_traces
from streams.child_process import stop_processes
from streams.pipeline import InProcessPipeline
from streams.produce import produce_traces
from streams.runtime import read_topic

SETTINGS = dict(sim_clock="virtual", sim_time_scale=0.0, batch_size=40, p=2, max_wait_s=1.0, partitions=4)


def many_traces(count: int, seed: int = 0) -> list[Trace]:
    return train_traces(build_suite(seed=7), count, playbook_ids=[f"pb{j}" for j in range(4)], run_seed=seed)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def _wait_incorporated(bootstrap, profile, settings, ids: set[str], timeout_s: float) -> list[PlaybookVersion]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = await read_topic(bootstrap, profile, settings.topic("playbook"), idle_s=0.2)
        versions = [PlaybookVersion.from_json_bytes(r.value) for r in records]
        if ids <= {t for v in versions for t in v.lineage}:
            return versions
        await asyncio.sleep(0.5)
    raise TimeoutError(f"traces not all incorporated within {timeout_s}s")


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def measure(broker, count: int, workers: int) -> dict:
    prefix = f"thr{uuid.uuid4().hex[:8]}."
    settings = CombeeSettings.load(env={}, topic_prefix=prefix, **SETTINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMBEE_")}
    env.update({f"COMBEE_{k.upper()}": str(v) for k, v in SETTINGS.items()},
               COMBEE_TOPIC_PREFIX=prefix, COMBEE_KAFKA_BOOTSTRAP=broker.bootstrap)
    from streams.worker import ensure_topics

    await ensure_topics(settings, broker.bootstrap)
    procs = [subprocess.Popen([sys.executable, "-m", "streams.cli", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    try:
        await asyncio.sleep(8)  # consumer groups settle (Tansu rebalances are slow to start)
        traces = many_traces(count)
        started = time.time()
        await produce_traces(settings, broker.bootstrap, broker.profile, traces)
        produced_s = time.time() - started
        versions = await _wait_incorporated(broker.bootstrap, broker.profile, settings,
                                            {t.trace_id for t in traces}, timeout_s=900)
        trace_records = await read_topic(broker.bootstrap, broker.profile, settings.topic("traces"))
        sent_at = {Trace.from_json_bytes(r.value).trace_id: r.timestamp / 1000 for r in trace_records}
        latencies = [v.published_at.timestamp() - sent_at[t] for v in versions for t in v.lineage if t in sent_at]
        last = max(v.published_at.timestamp() for v in versions)
        first = min(sent_at.values())
        rss = [_peak_rss_mib(p.pid) for p in procs]
    finally:
        stop_processes(procs, timeout_s=30)
    return dict(workers=workers, traces=count, versions=len(versions), produce_s=round(produced_s, 2),
                traces_per_s=round(count / (last - first), 1), p50_latency_s=round(percentile(latencies, 0.5), 2),
                p99_latency_s=round(percentile(latencies, 0.99), 2), worker_peak_rss_mib=[round(r) for r in rss])


async def profile_in_process(broker, count: int) -> str:
    """cProfile of an in-process run: functions by own time, then the stages' handlers by cumulative time."""
    settings = CombeeSettings.load(env={}, topic_prefix=f"prof{uuid.uuid4().hex[:8]}.", **SETTINGS)
    traces = many_traces(count)
    profiler = cProfile.Profile()
    async with InProcessPipeline(settings, broker.bootstrap, broker.profile) as run:
        profiler.enable()
        await produce_traces(settings, broker.bootstrap, broker.profile, traces)
        await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=900)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(r"stages/|combee_core/(playbook|reduction|shuffle|llm/roles)", 15)
    return out.getvalue()


async def run_all(count: int, worker_counts: list[int], profile: bool) -> dict:
    broker = start_broker()
    try:
        rows = []
        for workers in worker_counts:
            row = await measure(broker, count, workers)
            print(f"  {workers} worker(s): {row}", file=sys.stderr, flush=True)
            rows.append(row)
        profile_text = await profile_in_process(broker, count) if profile else None
    finally:
        broker.stop()
    return dict(machine=machine(), broker=broker.source, settings=SETTINGS, rows=rows, profile=profile_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    result = asyncio.run(run_all(args.traces, [int(w) for w in args.workers.split(",")], args.profile))
    print(f"broker: {result['broker']}; {args.traces} traces, 4 playbooks, batch 40, p 2, zero-latency simulator")
    print(f"{'workers':>7} {'traces/s':>9} {'p50 s':>7} {'p99 s':>7} {'versions':>8} {'peak RSS MiB':>14}")
    for row in result["rows"]:
        print(f"{row['workers']:>7} {row['traces_per_s']:>9} {row['p50_latency_s']:>7} {row['p99_latency_s']:>7} "
              f"{row['versions']:>8} {str(row['worker_peak_rss_mib']):>14}")
    if result["profile"]:
        print("\nWhere the time goes (in-process run, cProfile):")
        print(result["profile"])
    write_results(args.out / "throughput.json", result)
    print(f"wrote {args.out / 'throughput.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
