"""Sustained load at real LLM latency: does one playbook's stream keep up, minute after minute?

    python -m bench.sustained [--rates 10,20,30] [--seconds 60] [--workers 1,2] [--playbooks 1]
                              [--out bench/results] [--set name=value ...] [--name sustained]

Each run is a fresh namespace, ``--workers`` fresh ``combee worker`` processes (all stages each) on the broker
(``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded Tansu), and traces sent at ``--rate`` traces/s for
``--seconds`` seconds, of one playbook (``--playbooks`` N: dealt round-robin over N, on distinct partitions; one
playbook's reflection and versions stay on one worker, so a second worker helps only with a second playbook).
The simulator's latency is **slept** (``sim_clock=real``, ``time_scale`` 1: a reflection ~1 s, an aggregator or
reducer call 1-4 s, `docs/simulator.md`), as a real model's would be; the
controller is on (``auto_batch_size``, async fleet: the streaming objective) and the LLM concurrency adapts
(``llm_concurrency`` 8 at the start, ceiling ``llm_concurrency_max`` 64); a batch closes after at most
``batch_idle_s`` 3 s without a new reflection, and after 10 of the stream's gaps (at least 0.5 s) once the reflector
said it had no trace left (so the last traces are not held ``max_wait_s``). ``--set`` overrides any setting.

Per run, from the topics (versions, dead letters) and the send times this process recorded:

- **latency** per trace, its version's ``published_at`` - its send time: p50 and p99 over the whole run, over the
  first fifth of the traces sent and over the last fifth (``last/first``: 1 when the pipeline keeps up, growing
  with the run when it falls behind);
- **drain**: the last version's ``published_at`` - the last send, against the **cycle** (the median time between
  two versions), and its timeline after the last send (``bench.drain_timeline``): the last batch's last reflection,
  its close (and by what), its last copy dealt, the previous version out, its first aggregator call's start, its last
  partial, its version; the same parts (wait for the previous version, hand-off, aggregate, reduce) as medians over
  the 20 versions before it;
- **batch sizes** the versions were made at (first and last fifth of the versions), **versions behind** (versions
  published between a trace's send and the version that learned it; p50 and p99), **lost** (sent, neither in a
  version nor a dead letter), dead letters by type;
- **lag**, scraped from the worker's ``/metrics`` every 5 s (``combee_playbook_lag_traces``, ``..._lag_seconds``,
  ``..._falling_behind``): the largest seen, and when the first falling-behind flag came up;
- the machine's load average before and after (the machine may be shared: figures under load are slower).

**Sustainable** here: the last fifth's p50 latency within 1.5x the first fifth's, and 0 lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import machine, start_broker, write_results
from bench.drain_timeline import drain_parts
from combee_core.models import PlaybookVersion
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from combee_core.topology import Topic
from streams.testing.worker_fleet import WorkerFleet
from streams.topology.follower import PlaybookFollower
from streams.topology.kafka_clients import start_producer

SETTINGS: dict[str, Any] = dict(
    sim_clock="real", sim_time_scale=1.0, batch_size=40, max_wait_s=10.0, partitions=4, p=2,
    auto_batch_size=True, fleet_mode="async", llm_concurrency=8, llm_concurrency_max=64, batch_idle_s=3.0,
)
PLAYBOOK = "fleet"
SCRAPE_EVERY_S = 5.0


def playbook_ids(count: int, partitions: int) -> list[str]:
    """``count`` playbook ids on distinct partitions where possible (``fleet``, ``fleet1``, ...): one playbook's
    reflection and versions do not spread over workers, several playbooks' do."""
    from streams.topology.kafka_clients import partition_for

    chosen: list[str] = []
    used: set[int] = set()
    n = 0
    while len(chosen) < count:
        name = PLAYBOOK if n == 0 else f"{PLAYBOOK}{n}"
        if partition_for(name, partitions) not in used or len(used) >= partitions:
            chosen.append(name)
            used.add(partition_for(name, partitions))
        n += 1
    return chosen


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def scrape(port: int) -> dict[str, float]:
    """The worker's combee_playbook_* gauges, summed over the bench's playbooks (max for ages and flags; empty when
    it does not answer)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        await writer.drain()
        body = (await asyncio.wait_for(reader.read(), 5)).decode(errors="replace")
        writer.close()
    except (OSError, TimeoutError):
        return {}
    found: dict[str, float] = {}
    for name, value in re.findall(rf'^(combee_playbook_\w+)\{{playbook="{PLAYBOOK}\d*"\}} (\S+)$', body, re.M):
        keep_max = name.endswith(("_seconds", "_falling_behind"))
        found[name] = max(found.get(name, 0.0), float(value)) if keep_max else found.get(name, 0.0) + float(value)
    return found


class SustainedRun:
    """Fresh workers (:class:`streams.testing.worker_fleet.WorkerFleet`, as the fault tests start them) on a fresh
    namespace; logs in a temporary directory (kept when a worker dies)."""

    def __init__(self, broker, workers: int, overrides: dict[str, Any]) -> None:
        self.broker, self.workers = broker, workers
        self.values = {**SETTINGS, **overrides}
        self.prefix = f"sus{uuid.uuid4().hex[:8]}."
        self.settings = CombeeSettings.load(env={}, topic_prefix=self.prefix, **self.values)
        self.fleet = WorkerFleet(broker, self.prefix, Path(tempfile.mkdtemp(prefix="sustained-")),
                                 extra_env={f"COMBEE_{k.upper()}": str(v) for k, v in self.values.items()}
                                 | {"COMBEE_LOG_LEVEL": "INFO"})
        self.versions: list[PlaybookVersion] = []
        self.follower: PlaybookFollower | None = None

    async def __aenter__(self) -> SustainedRun:
        from streams.topology.worker import ensure_topics

        await ensure_topics(self.settings, self.broker.bootstrap, connection=self.broker.profile.connection)
        for number in range(self.workers):
            self.fleet.start(number)
        self.follower = PlaybookFollower(self.settings, self.broker.bootstrap, self.broker.profile,
                                         on_version=self.versions.append, check_alive=self.check_alive)
        await self.follower.__aenter__()
        warm = train_traces(build_suite(seed=7), 8 * self.workers, playbook_ids=[f"warm{j}" for j in range(4)],
                            run_seed=99)
        await send(self.settings, self.broker, warm, rate=100.0)
        await self.follower.wait_incorporated({t.trace_id for t in warm}, 300, "the warm-up traces")
        self.versions.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.follower is not None:
                await self.follower.__aexit__(*exc)
        finally:
            self.fleet.stop_all()

    def check_alive(self) -> None:
        self.fleet.check_alive()

    def health_ports(self) -> list[int]:
        ports = []
        for number in range(self.workers):
            if found := re.search(r"health on :(\d+)", self.fleet.log_text(number)):
                ports.append(int(found.group(1)))
        return ports

    def warnings(self) -> list[str]:
        lines = []
        for number in range(self.workers):
            text = self.fleet.log_text(number)
            lines += [line for line in text.splitlines() if "FALLING BEHIND" in line or "over capacity" in line]
        return lines


async def send(settings: CombeeSettings, broker, traces, rate: float) -> dict[str, float]:
    """Produce ``traces`` at ``rate`` per second (absolute schedule); the wall time each was sent."""
    producer = await start_producer(broker.bootstrap, broker.profile)
    topic = settings.topic(Topic.TRACES)
    sent: dict[str, float] = {}
    started = time.monotonic()
    try:
        for index, trace in enumerate(traces):
            await asyncio.sleep(max(0.0, started + index / rate - time.monotonic()))
            await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode())
            sent[trace.trace_id] = time.time()
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def measure(broker, rate: float, seconds: float, workers: int, overrides: dict[str, Any],
                  playbooks: int = 1) -> dict[str, Any]:
    count = int(rate * seconds)
    partitions = int({**SETTINGS, **overrides}["partitions"])
    traces = train_traces(build_suite(seed=7), count, playbook_ids=playbook_ids(playbooks, partitions), run_seed=1)
    load_before = os.getloadavg()
    async with SustainedRun(broker, workers, overrides) as run:
        scrapes: list[tuple[float, dict[str, float]]] = []
        started = time.time()

        async def scraper() -> None:
            while True:
                for port in run.health_ports():
                    gauges = await scrape(port)
                    if gauges:
                        scrapes.append((time.time() - started, gauges))
                await asyncio.sleep(SCRAPE_EVERY_S)

        scraping = asyncio.create_task(scraper())
        try:
            sent = await send(run.settings, broker, traces, rate)
            stream_end = time.time()
            assert run.follower is not None
            ids = set(sent)
            try:
                await run.follower.wait_incorporated(ids, max(300.0, 3 * seconds), f"{count} traces")
            except TimeoutError:
                pass  # reported as lost
        finally:
            scraping.cancel()
        dead = [d for d in run.follower.dead_letters if d.trace_id in ids]
        tail = await drain_parts(run.settings, broker, stream_end, run.versions, PLAYBOOK)
        warnings = run.warnings()
        versions = [v for v in run.versions if v.playbook_id.startswith(PLAYBOOK)]
    return {**summarise(rate, seconds, workers, playbooks, traces, sent, stream_end, versions, dead, scrapes, started,
                        warnings, load_before), **tail}


def summarise(rate, seconds, workers, playbooks, traces, sent, stream_end, versions, dead, scrapes, started, warnings,
              load_before) -> dict[str, Any]:
    landed: dict[str, PlaybookVersion] = {}
    for version in versions:
        for trace_id in version.lineage:
            landed.setdefault(trace_id, version)
    order = [t.trace_id for t in traces]
    fifth = max(1, len(order) // 5)
    published = sorted(v.published_at.timestamp() for v in versions)

    def latencies(ids: list[str]) -> list[float]:
        return [landed[t].published_at.timestamp() - sent[t] for t in ids if t in landed]

    published_of: dict[str, list[float]] = {}
    for version in versions:
        published_of.setdefault(version.playbook_id, []).append(version.published_at.timestamp())

    def behind(trace_id: str) -> int:
        version = landed[trace_id]
        return sum(1 for at in published_of[version.playbook_id]
                   if sent[trace_id] < at < version.published_at.timestamp())

    first, last, whole = latencies(order[:fifth]), latencies(order[-fifth:]), latencies(order)
    rounds = [b - a for times in published_of.values() for a, b in zip(sorted(times), sorted(times)[1:])]
    cycle = statistics.median(rounds) if rounds else float("nan")
    drain = (published[-1] - stream_end) if published else float("nan")
    sizes = [v.stats.batch_size for v in sorted(versions, key=lambda v: v.version)]
    vfifth = max(1, len(sizes) // 5)
    lost = len(set(sent) - set(landed) - {d.trace_id for d in dead})
    lag_traces = [g.get("combee_playbook_lag_traces", 0.0) for _, g in scrapes]
    lag_s = [g.get("combee_playbook_lag_seconds", 0.0) for _, g in scrapes]
    flagged = [at for at, g in scrapes if g.get("combee_playbook_falling_behind") == 1.0]
    p50_first, p50_last = percentile(first, 0.5), percentile(last, 0.5)
    return dict(
        rate=rate, seconds=seconds, workers=workers, playbooks=playbooks, traces=len(order), versions=len(versions),
        p50_s=round(percentile(whole, 0.5), 2), p99_s=round(percentile(whole, 0.99), 2),
        first_fifth_p50_s=round(p50_first, 2), first_fifth_p99_s=round(percentile(first, 0.99), 2),
        last_fifth_p50_s=round(p50_last, 2), last_fifth_p99_s=round(percentile(last, 0.99), 2),
        last_over_first=round(p50_last / p50_first, 2) if p50_first > 0 else None,
        drain_s=round(drain, 2), cycle_s=round(cycle, 2),
        batch_sizes_first=sizes[:vfifth], batch_sizes_last=sizes[-vfifth:],
        versions_behind_p50=percentile([behind(t) for t in order if t in landed], 0.5),
        versions_behind_p99=percentile([behind(t) for t in order if t in landed], 0.99),
        lost=lost, dead_letters=dict(Counter(d.error_type for d in dead)),
        max_lag_traces=max(lag_traces, default=None), max_lag_s=round(max(lag_s, default=0.0), 1),
        first_falling_behind_s=round(min(flagged), 1) if flagged else None,
        warnings=len(warnings), warning_example=warnings[0][-300:] if warnings else None,
        sustainable=bool(p50_first > 0 and p50_last <= 1.5 * p50_first and lost == 0),
        load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()],
    )


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        values[name.strip()] = value
    return values


async def run_all(rates: list[float], seconds: float, worker_counts: list[int], overrides: dict[str, Any],
                  playbooks: int = 1) -> dict:
    broker = start_broker()
    rows = []
    try:
        for workers in worker_counts:
            for rate in rates:
                row = await measure(broker, rate, seconds, workers, overrides, playbooks)
                print(f"  {workers} worker(s), {rate:g} traces/s: {row}", file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        broker.stop()
    return dict(machine=machine(), broker=broker.source, settings={**SETTINGS, **overrides}, rows=rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10,20,30")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", default="1")
    parser.add_argument("--playbooks", type=int, default=1, help="playbooks the stream is dealt over (on distinct "
                        "partitions): one playbook's versions do not spread over workers")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--name", default="sustained")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    result = asyncio.run(run_all(rates, args.seconds, workers, parse_sets(args.set), args.playbooks))
    write_results(args.out / f"{args.name}.json", result)
    print(f"{'workers':>7} {'rate':>5} {'p50':>6} {'p99':>6} {'1st p50':>7} {'last p50':>8} {'last/1st':>8} "
          f"{'drain':>6} {'refl@':>6} {'closed@':>7} {'cycle':>6} {'lost':>4} {'max lag':>7} {'behind@':>7} "
          "sustainable")
    for row in result["rows"]:
        print(f"{row['workers']:>7} {row['rate']:>5g} {row['p50_s']:>6} {row['p99_s']:>6} "
              f"{row['first_fifth_p50_s']:>7} {row['last_fifth_p50_s']:>8} {row['last_over_first']!s:>8} "
              f"{row['drain_s']:>6} {row['last_reflection_s']!s:>6} {row['last_batch_closed_s']!s:>7} "
              f"{row['cycle_s']:>6} "
              f"{row['lost']:>4} {row['max_lag_traces']!s:>7} {row['first_falling_behind_s']!s:>7} "
              f"{row['sustainable']}")
        print(f"        drain timeline after the last send (s): {row.get('drain_timeline')}; parts "
              f"{row.get('drain_last_parts')}; steady parts {row.get('steady_parts')} "
              f"(close -> version {row.get('steady_close_to_version_s')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
