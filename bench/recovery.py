"""Recovery after a kill, and restart time against the stream's age.

    python -m bench.recovery [--kills 5] [--ages 10000,100000] [--out bench/results]

1. Two ``combee worker`` processes (all stages) learn 3 playbooks from traces fed at 20/s with real-time simulated
   latency (``streams.testing.worker_fleet``); every ~15 s one of them, chosen at random, is killed (-9) and restarted
   a second later. Recovery time of a kill: from the kill until every playbook has published a version again. The
   steady-state gap between versions of a playbook is printed beside it for scale. The run is audited from its
   topics afterwards (every trace in exactly one lineage or a dead letter).
2. Restart time: ``batches`` and ``playbook`` prefilled with N valid batches (10 traces each) and N versions of one
   playbook; a worker (batch and reduce stages) is started, which reads both topics from the beginning and writes
   view checkpoints as it goes, and stopped; then started again. The time from each start until both stages own
   their partitions (their live views caught up) is the first-start and the restart time at that stream age. A
   restart reads the batches within the dedupe horizon (10 traces a batch) and the latest version, not the topics.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench.common import machine, write_results
from combee_core.log_order import valid_versions
from combee_core.models import BatchManifest, PlaybookVersion, VersionStats
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from combee_core.topology import Topic
from streams.testing.broker_under_test import ResolvedBroker, resolve_test_bootstrap
from streams.testing.worker_fleet import WorkerFleet, feed, fleet_settings, read_run, wait_accounted
from streams.topology.kafka_clients import start_producer
from streams.topology.runtime import Stage
from streams.topology.worker import ensure_topics, run_worker

PLAYBOOKS = ("alpha", "beta", "gamma")
RATE_PER_S = 20.0


async def kill_recovery(broker: ResolvedBroker, kills: int, seed: int) -> dict:
    rng = random.Random(seed)
    prefix = f"bench-recovery-{uuid.uuid4().hex[:8]}."
    settings = fleet_settings(prefix)
    duration_s = 20 + 15 * kills
    count = int(duration_s * RATE_PER_S) // len(PLAYBOOKS)
    per_playbook = [train_traces(build_suite(seed=7), count, playbook_ids=(pb,), run_seed=i)
                    for i, pb in enumerate(PLAYBOOKS)]
    traces = [t for group in zip(*per_playbook) for t in group]
    kill_times: list[datetime] = []
    with tempfile.TemporaryDirectory(prefix="combee-recovery-") as logs:
        fleet = WorkerFleet(broker, prefix, Path(logs))
        try:
            feeding = asyncio.create_task(feed(settings, broker, traces, RATE_PER_S))
            fleet.start(1)
            fleet.start(2)
            await asyncio.sleep(20)
            for _ in range(kills):
                victim = rng.choice(sorted(fleet.processes))
                kill_times.append(datetime.now(timezone.utc))
                fleet.kill(victim)
                await asyncio.sleep(1)
                fleet.start(victim)
                await asyncio.sleep(14)
            await feeding
            audit = await wait_accounted(settings, broker, fleet, {t.trace_id for t in traces}, 600)
        finally:
            fleet.stop_all()
    versions = valid_versions((await read_run(settings, broker))[0])
    recoveries = []
    for killed_at in kill_times:
        firsts = [min((v.published_at for v in versions if v.playbook_id == pb and v.published_at > killed_at),
                      default=None) for pb in PLAYBOOKS]
        if all(firsts):
            recoveries.append(max((f - killed_at).total_seconds() for f in firsts if f))
    gaps: list[float] = []
    for pb in PLAYBOOKS:
        mine = [v.published_at for v in versions if v.playbook_id == pb]
        gaps += [(b - a).total_seconds() for a, b in zip(mine, mine[1:])]
    return {
        "kills": kills, "seed": seed, "traces": len(traces), "recoveries_s": recoveries,
        "recovery_median_s": statistics.median(recoveries) if recoveries else None,
        "recovery_max_s": max(recoveries) if recoveries else None,
        "version_gap_median_s": statistics.median(gaps) if gaps else None,
        "problems": audit.problems(), "learned": audit.learned, "dead_lettered": audit.dead_lettered,
    }


class _Stages:
    """A ``readiness`` hook for ``run_worker``: hands over the worker's stage instances."""

    def __init__(self) -> None:
        self.stages: list[Stage] = []

    def watch(self, stages, tasks) -> None:
        self.stages = list(stages)


async def restart_time(broker: ResolvedBroker, batches: int, dedupe_horizon: int) -> dict:
    prefix = f"bench-restart-{uuid.uuid4().hex[:8]}."
    settings = CombeeSettings.load(env={}, topic_prefix=prefix, sim_clock="virtual", partitions=2,
                                   dedupe_horizon=dedupe_horizon)
    await ensure_topics(settings, broker.bootstrap, connection=broker.profile.connection)
    now = datetime.now(timezone.utc)
    producer = await start_producer(broker.bootstrap, broker.profile)
    filled = time.monotonic()
    try:
        for batch_id in range(batches):
            ids = [f"aged-{batch_id}-{i}" for i in range(10)]
            manifest = BatchManifest(playbook_id="aged", batch_id=batch_id, base_version=batch_id, trace_ids=ids,
                                     reflection_ids=ids, n=10, k=3, p=2, seed=batch_id, subgroup_sizes=[7, 7, 6],
                                     target_batch_size=10, closed_by="size", closed_at=now)
            version = PlaybookVersion(playbook_id="aged", version=batch_id + 1, parent_version=batch_id,
                                      batch_id=batch_id, entries=[], next_entry_number=1, operations=[], lineage=ids,
                                      stats=VersionStats(batch_size=10, k=3, p=2), content_hash="0" * 64,
                                      published_at=now)
            await producer.send(settings.topic(Topic.BATCHES), manifest.to_json_bytes(), key=b"aged")
            await producer.send(settings.topic(Topic.PLAYBOOK), version.to_json_bytes(), key=b"aged")
        await producer.flush()
    finally:
        await producer.stop()
    filled = time.monotonic() - filled
    cold, cold_read = await _time_to_own(settings, broker)  # reads the topics from the start, writing checkpoints
    warm, warm_read = await _time_to_own(settings, broker)  # resumes from the checkpoints
    return {"batches": batches, "dedupe_horizon": settings.dedupe_horizon, "prefill_s": filled,
            "first_start_s": cold, "first_start_records_read": cold_read, "restart_s": warm,
            "restart_records_read": warm_read}


async def _time_to_own(settings: CombeeSettings, broker: ResolvedBroker) -> tuple[float, int]:
    """Seconds from starting a worker (batch and reduce stages) until both own their partitions, and the records
    their state views read to get there."""
    hook, stop = _Stages(), asyncio.Event()
    started = time.monotonic()
    worker = asyncio.create_task(run_worker(settings, broker.bootstrap, broker.profile, ("batch", "reduce"),
                                            stop=stop, readiness=hook))
    try:
        while not (hook.stages and all(stage.assigned for stage in hook.stages)):
            if worker.done():
                worker.result()
            await asyncio.sleep(0.05)
        return time.monotonic() - started, sum(view.applied for stage in hook.stages for view in stage.views)
    finally:
        stop.set()
        await worker


async def run(args: argparse.Namespace) -> dict:
    broker = resolve_test_bootstrap()
    try:
        restarts = [await restart_time(broker, int(age), int(horizon)) for horizon in args.horizons.split(",")
                    for age in args.ages.split(",")]
        recovery = await kill_recovery(broker, args.kills, args.seed)
    finally:
        broker.stop()
    return {"machine": machine(), "restarts": restarts, "recovery": recovery}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--ages", default="0,10000,100000", help="batches (and versions) in the topics at restart")
    parser.add_argument("--horizons", default="1000000,100000", help="dedupe horizons (trace ids per playbook)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    print(f"{'batches in log':>14} {'dedupe horizon':>14} {'first start s':>13} {'records read':>12} "
          f"{'restart s':>10} {'records read':>12}")
    for row in results["restarts"]:
        print(f"{row['batches']:>14} {row['dedupe_horizon']:>14} {row['first_start_s']:>13.2f} "
              f"{row['first_start_records_read']:>12} {row['restart_s']:>10.2f} {row['restart_records_read']:>12}")
    rec = results["recovery"]
    if not rec["recoveries_s"]:
        print(f"no kill recovered: {rec}")
        return 1
    print(f"kill -9 x{rec['kills']} (2 workers, 3 playbooks, {RATE_PER_S:.0f} traces/s): recovery median "
          f"{rec['recovery_median_s']:.1f} s, max {rec['recovery_max_s']:.1f} s (steady gap between versions "
          f"{rec['version_gap_median_s']:.1f} s); {rec['learned']} learned, {rec['dead_lettered']} dead-lettered, "
          f"problems: {rec['problems'] or 'none'}")
    write_results(args.out / "recovery.json", results)
    print(f"wrote {args.out / 'recovery.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
