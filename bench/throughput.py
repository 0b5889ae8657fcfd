"""Streaming throughput with a zero-latency simulator: CPU per trace, traces/s at saturation, latency at a steady rate.

    python -m bench.throughput [--traces 5000] [--workers 1] [--rate 200] [--steady-s 20] [--profile]
                               [--without-litellm] [--out bench/results]

Every measurement uses a fresh run namespace and fresh ``combee worker`` processes (all stages each; stages scale
out as consumer-group members) on the broker (``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded Tansu). The
simulator's clock is virtual with time scale 0: each call's latency is modelled but neither slept nor added, so every
second measured here is time beyond the modelled LLM time.

Each new worker first gets ``WARM_UP_TRACES`` traces of other playbooks (not measured), so that start-up work
(imports, litellm's lazy loading on the first calls) is not counted as per-trace work.

1. **Saturation** (per worker count): ``--traces`` traces produced in one burst. Traces/s = traces / (the last
   version's ``published_at`` - the first trace's record timestamp). **CPU per trace** = the CPU seconds (user +
   system, ``/proc/PID/stat``) the worker processes used from just before the burst until the last trace is in a
   version, divided by the traces; also net of the workers' idle CPU rate (measured for a few seconds before the
   burst) over that time. The embedded broker's CPU over the same window is reported separately. The worker's CPU
   share (CPU seconds / window seconds) and run-queue wait share (seconds its threads were runnable but waiting for a
   CPU, ``/proc/PID/task/*/schedstat``) tell whether it was limited by its own CPU, by other work on the machine, or
   by waiting on the broker. ``--without-litellm`` adds one run whose worker answers from the simulator directly
   (``bench.direct_worker``; not a product path): what everything but litellm costs.
2. **Steady rate** (one worker): traces produced at ``--rate`` traces/s for ``--steady-s`` seconds. Per trace: its
   version's ``published_at`` - its record timestamp (p50, p99), and the part after its batch closed (version
   ``published_at`` - the manifest's ``closed_at``): before it, the batch fills up (batch 40 over 4 playbooks: the
   method, not overhead) and traces may queue in the reflector.
3. **The LLM client's share** (in this process, no broker): CPU per reflector call through ``LLMRoles`` and
   ``litellm.acompletion`` (the simulator as litellm's custom provider) minus CPU per call through ``LLMRoles``
   answering from the same simulator directly (a ``responder``, as replay does): what litellm costs per call. With
   the run's LLM calls per trace (records on ``llm-calls``), it splits the worker's CPU per trace into the LLM
   client and everything else. Also CPU per call through litellm's OpenAI path to a stub OpenAI-compatible server
   in another process (the real client path without the network and the model).

``--profile`` also runs the topology in-process under cProfile and prints where the time goes.
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
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import machine, start_broker, write_results
from bench.llm_client_cost import client_cpu_per_call
from combee_core.models import BatchManifest, PlaybookVersion, Trace
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from combee_core.topology import Topic
from streams.testing.worker_fleet import WorkerFleet
from streams.topology.follower import PlaybookFollower
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import TopicReader, read_topic

SETTINGS = dict(sim_clock="virtual", sim_time_scale=0.0, batch_size=40, p=2, max_wait_s=1.0, partitions=4)
SETTLE_S = 8.0
"""Seconds a new worker gets to join its consumer groups (Tansu rebalances are slow to start)."""
WARM_UP_TRACES = 160
"""Traces (of 4 other playbooks) sent through a new worker before measuring: its imports and first calls (litellm
loads much of itself lazily, on the first call) are start-up cost, not per-trace cost."""
IDLE_S = 3.0
"""Seconds over which the idle CPU rate of the workers and the broker is measured, before traces are sent."""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def many_traces(count: int, seed: int = 0) -> list[Trace]:
    return train_traces(build_suite(seed=7), count, playbook_ids=[f"pb{j}" for j in range(4)], run_seed=seed)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (NaN if unknown)."""
    if pid is None:
        return float("nan")
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15 of proc(5))


def runqueue_wait_s(pid: int | None) -> float:
    """Seconds the threads of a process have spent runnable but waiting for a CPU (``/proc/PID/task/*/schedstat``,
    second field; NaN if unknown). Over a window, with the CPU seconds, it tells a process that is starved by other
    work on the machine from one that waits on I/O."""
    if pid is None:
        return float("nan")
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[1])
    except (FileNotFoundError, ProcessLookupError):  # a thread ended while being read: its time is lost
        pass
    except OSError:
        return float("nan")
    return total / 1e9


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Run:
    """A fresh namespace with ``workers`` worker processes, a follower of its versions, and CPU meters."""

    def __init__(self, broker, workers: int, without_litellm: bool = False) -> None:
        self.broker = broker
        self.workers = workers
        self.prefix = f"thr{uuid.uuid4().hex[:8]}."
        self.settings = CombeeSettings.load(env={}, topic_prefix=self.prefix, **SETTINGS)
        self.versions: list[PlaybookVersion] = []
        # as the fault tests start workers; the command line's default log level (WARNING): the CPU per trace
        # measured here is not that of INFO logging
        self.fleet = WorkerFleet(broker, self.prefix, Path(tempfile.mkdtemp(prefix="throughput-")),
                                 extra_env={f"COMBEE_{k.upper()}": str(v) for k, v in SETTINGS.items()}
                                 | {"COMBEE_LOG_LEVEL": "WARNING"})
        if without_litellm:
            self.fleet.command = ("-m", "bench.direct_worker")
        self.follower: PlaybookFollower | None = None

    @property
    def procs(self) -> list[subprocess.Popen]:
        return list(self.fleet.processes.values())

    async def __aenter__(self) -> Run:
        from streams.topology.worker import ensure_topics

        await ensure_topics(self.settings, self.broker.bootstrap, connection=self.broker.profile.connection)
        for number in range(self.workers):
            self.fleet.start(number)
        self.follower = PlaybookFollower(self.settings, self.broker.bootstrap, self.broker.profile,
                                         on_version=self.versions.append, check_alive=self._check_alive)
        await self.follower.__aenter__()
        await asyncio.sleep(SETTLE_S)
        warm = train_traces(build_suite(seed=7), WARM_UP_TRACES, playbook_ids=[f"warm{j}" for j in range(4)],
                            run_seed=99)
        await produce_traces(self.settings, self.broker.bootstrap, self.broker.profile, warm)
        await self.follower.wait_incorporated({t.trace_id for t in warm}, 600, "the warm-up traces")
        self.versions.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.follower is not None:
                await self.follower.__aexit__(*exc)
        finally:
            self.fleet.stop_all()

    def _check_alive(self) -> None:
        self.fleet.check_alive()

    def worker_cpu_s(self) -> float:
        return sum(cpu_s(p.pid) for p in self.procs)

    def worker_wait_s(self) -> float:
        return sum(runqueue_wait_s(p.pid) for p in self.procs)

    async def llm_calls_recorded(self) -> int:
        """Records on the run's ``llm-calls`` topic so far (one per LLM call attempt)."""
        async with TopicReader(self.broker.bootstrap, self.broker.profile) as reader:
            tps = await reader.partitions(self.settings.topic(Topic.LLM_CALLS), refresh=True)
            return sum((await reader.end_offsets(tps)).values())

    def broker_cpu_s(self) -> float:
        return cpu_s(getattr(self.broker.handle, "pid", None))

    async def idle_rates(self) -> tuple[float, float]:
        """CPU seconds per second of the workers and of the broker while no trace is sent."""
        workers, broker, started = self.worker_cpu_s(), self.broker_cpu_s(), time.monotonic()
        await asyncio.sleep(IDLE_S)
        elapsed = time.monotonic() - started
        return (self.worker_cpu_s() - workers) / elapsed, (self.broker_cpu_s() - broker) / elapsed

    async def record_times(self, traces: list[Trace]) -> tuple[dict[str, float], dict[tuple[str, int], float]]:
        """Record timestamp of each trace (s), and ``closed_at`` of each batch (s), read back from the topics."""
        bootstrap, profile = self.broker.bootstrap, self.broker.profile
        wanted = {t.trace_id for t in traces}
        sent_at = {}
        for record in await read_topic(bootstrap, profile, self.settings.topic(Topic.TRACES)):
            trace = Trace.from_json_bytes(record.value)
            if trace.trace_id in wanted:
                sent_at[trace.trace_id] = record.timestamp / 1000
        closed_at: dict[tuple[str, int], float] = {}
        for record in await read_topic(bootstrap, profile, self.settings.topic(Topic.BATCHES)):
            manifest = BatchManifest.from_json_bytes(record.value)
            closed_at.setdefault((manifest.playbook_id, manifest.batch_id), manifest.closed_at.timestamp())
        return sent_at, closed_at


async def measure_saturation(broker, count: int, workers: int, without_litellm: bool = False) -> dict:
    traces = many_traces(count)
    async with Run(broker, workers, without_litellm) as run:
        idle_worker, idle_broker = await run.idle_rates()
        calls_before = await run.llm_calls_recorded()
        worker_before, broker_before, started = run.worker_cpu_s(), run.broker_cpu_s(), time.monotonic()
        wait_before = run.worker_wait_s()
        await produce_traces(run.settings, broker.bootstrap, broker.profile, traces)
        produced_s = time.monotonic() - started
        assert run.follower is not None
        await run.follower.wait_incorporated({t.trace_id for t in traces}, 900, f"{count} traces")
        elapsed = time.monotonic() - started
        worker_cpu, broker_cpu = run.worker_cpu_s() - worker_before, run.broker_cpu_s() - broker_before
        worker_wait = run.worker_wait_s() - wait_before
        rss = [_peak_rss_mib(p.pid) for p in run.procs]
        calls = await run.llm_calls_recorded() - calls_before
        sent_at, _ = await run.record_times(traces)
        dead = len(run.follower.dead_letters)
    last = max(v.published_at.timestamp() for v in run.versions)
    first = min(sent_at.values())
    latencies = [v.published_at.timestamp() - sent_at[t] for v in run.versions for t in v.lineage if t in sent_at]
    return dict(
        workers=workers, without_litellm=without_litellm, traces=count, versions=len(run.versions), dead_letters=dead,
        produce_s=round(produced_s, 2),
        traces_per_s=round(count / (last - first), 1), p50_latency_s=round(percentile(latencies, 0.5), 2),
        p99_latency_s=round(percentile(latencies, 0.99), 2), window_s=round(elapsed, 2),
        worker_cpu_s=round(worker_cpu, 2), worker_cpu_ms_per_trace=round(1000 * worker_cpu / count, 3),
        worker_idle_cpu_per_s=round(idle_worker, 4), worker_cpu_share=round(worker_cpu / elapsed, 3),
        worker_runqueue_wait_share=round(worker_wait / elapsed, 3),
        worker_net_cpu_ms_per_trace=round(1000 * (worker_cpu - idle_worker * elapsed) / count, 3),
        broker_cpu_s=round(broker_cpu, 2), broker_cpu_ms_per_trace=round(1000 * broker_cpu / count, 3),
        broker_idle_cpu_per_s=round(idle_broker, 4), worker_peak_rss_mib=[round(r) for r in rss],
        llm_calls_per_trace=round(calls / count, 3),
    )


async def measure_steady(broker, rate: float, seconds: float, tick_s: float = 0.02) -> dict:
    """One worker; traces sent at ``rate`` per second (``rate * tick_s`` every ``tick_s``, on absolute times)."""
    count = int(rate * seconds)
    traces = many_traces(count, seed=1)
    async with Run(broker, 1) as run:
        producer = await start_producer(broker.bootstrap, broker.profile)
        topic = run.settings.topic(Topic.TRACES)
        worker_before, broker_before = run.worker_cpu_s(), run.broker_cpu_s()
        started = time.monotonic()
        try:
            for index, trace in enumerate(traces):
                due = started + index / rate
                if due - time.monotonic() > 0.001:
                    await asyncio.sleep(due - time.monotonic())
                await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode(),
                                    headers=[("schema_version", b"1")])
            await producer.flush()
        finally:
            await producer.stop()
        send_s = time.monotonic() - started
        assert run.follower is not None
        await run.follower.wait_incorporated({t.trace_id for t in traces}, 900, f"{count} traces")
        worker_cpu, broker_cpu = run.worker_cpu_s() - worker_before, run.broker_cpu_s() - broker_before
        sent_at, closed_at = await run.record_times(traces)
    total, after_close = [], []
    for version in run.versions:
        published = version.published_at.timestamp()
        closed = closed_at.get((version.playbook_id, version.batch_id))
        for trace_id in version.lineage:
            if trace_id in sent_at:
                total.append(published - sent_at[trace_id])
                if closed is not None:
                    after_close.append(published - closed)
    return dict(
        rate=rate, seconds=seconds, traces=count, achieved_rate=round(count / send_s, 1), versions=len(run.versions),
        p50_s=round(percentile(total, 0.5), 3), p99_s=round(percentile(total, 0.99), 3),
        after_close_p50_s=round(percentile(after_close, 0.5), 3),
        after_close_p99_s=round(percentile(after_close, 0.99), 3),
        worker_cpu_ms_per_trace=round(1000 * worker_cpu / count, 3),
        worker_cpu_share=round(worker_cpu / send_s, 3), broker_cpu_ms_per_trace=round(1000 * broker_cpu / count, 3),
    )


async def profile_in_process(broker, count: int) -> str:
    """cProfile of an in-process run: functions by own time, then the stages' handlers by cumulative time."""
    settings = CombeeSettings.load(env={}, topic_prefix=f"prof{uuid.uuid4().hex[:8]}.", **SETTINGS)
    traces = many_traces(count)
    profiler = cProfile.Profile(time.process_time)
    async with InProcessPipeline(settings, broker.bootstrap, broker.profile) as run:
        profiler.enable()
        await produce_traces(settings, broker.bootstrap, broker.profile, traces)
        await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=900)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(r"stages/|runtime|combee_core/(playbook|reduction|shuffle|llm/)", 25)
    return out.getvalue()


async def run_all(count: int, worker_counts: list[int], rate: float, steady_s: float, profile: bool,
                  without_litellm: bool = False) -> dict:
    broker = start_broker()
    try:
        rows = []
        for workers in worker_counts:
            row = await measure_saturation(broker, count, workers)
            print(f"  saturation, {workers} worker(s): {row}", file=sys.stderr, flush=True)
            rows.append(row)
        if without_litellm:  # the same run, the roles answering from the simulator directly (bench.direct_worker)
            row = await measure_saturation(broker, count, 1, without_litellm=True)
            print(f"  saturation without litellm: {row}", file=sys.stderr, flush=True)
            rows.append(row)
        steady = await measure_steady(broker, rate, steady_s) if rate > 0 else None
        if steady is not None:
            print(f"  steady: {steady}", file=sys.stderr, flush=True)
        profile_text = await profile_in_process(broker, count) if profile else None
    finally:
        broker.stop()
    return dict(machine=machine(), broker=broker.source, settings=SETTINGS, rows=rows, steady=steady,
                profile=profile_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--workers", default="1")
    parser.add_argument("--rate", type=float, default=200.0, help="traces/s of the steady run (0: skip it)")
    parser.add_argument("--steady-s", type=float, default=20.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--without-litellm", action="store_true",
                        help="also one saturation run whose worker answers from the simulator directly "
                             "(bench.direct_worker: what everything but litellm costs; not a product path)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    result = asyncio.run(run_all(args.traces, [int(w) for w in args.workers.split(",")], args.rate, args.steady_s,
                                 args.profile, args.without_litellm))
    # after the runs, with the broker stopped: nothing else in this process
    result["client"] = client_cpu_per_call(CombeeSettings.load(env={}, topic_prefix="cpu.", **SETTINGS),
                                           many_traces(300 * 5 + 50, seed=2))
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"broker: {result['broker']}; 4 playbooks, batch 40, p 2, zero-latency simulator (virtual clock, scale 0); "
          f"load average at the end {result['load_average_after']} on {os.cpu_count()} CPUs (other work on the "
          "machine slows wall-clock figures; CPU figures much less)")
    print(f"\nsaturation: {args.traces} traces in one burst")
    print(f"{'workers':>7} {'traces/s':>9} {'worker CPU ms/trace':>20} {'net of idle':>12} {'broker CPU ms/trace':>20} "
          f"{'p50 s':>7} {'p99 s':>7} {'versions':>8} {'peak RSS MiB':>13} {'CPU share':>9} {'run-queue wait':>14}")
    for row in result["rows"]:
        workers = f"{row['workers']}{' *' if row.get('without_litellm') else ''}"
        print(f"{workers:>7} {row['traces_per_s']:>9} {row['worker_cpu_ms_per_trace']:>20} "
              f"{row['worker_net_cpu_ms_per_trace']:>12} {row['broker_cpu_ms_per_trace']:>20} "
              f"{row['p50_latency_s']:>7} {row['p99_latency_s']:>7} {row['versions']:>8} "
              f"{str(row['worker_peak_rss_mib']):>13} {row['worker_cpu_share']:>9.0%} "
              f"{row['worker_runqueue_wait_share']:>14.0%}")
    print("      CPU share: the worker's CPU seconds / the window's seconds; run-queue wait: seconds its threads were "
          "runnable but waiting for a CPU (other work on the machine) / the window's seconds")
    if any(row.get("without_litellm") for row in result["rows"]):
        print("      * the worker's roles answer from the simulator directly, not through litellm "
              "(bench.direct_worker: a measurement of everything but litellm, not a product path)")
    client = result["client"]
    print(f"\nLLM client: {client['litellm_ms_per_call']} ms CPU per reflector call through litellm.acompletion, "
          f"{client['direct_ms_per_call']} ms answered by the same simulator directly -> litellm costs "
          f"{client['client_ms_per_call']} ms per call; through litellm's OpenAI path to a local stub server (the real "
          f"path: litellm + openai SDK + HTTP): {client['litellm_http_ms_per_call']} ms per call")
    print(f"litellm's floor: {client['litellm_instant_ms_per_call']} ms CPU per call through litellm.acompletion to a "
          f"provider that answers at once, {client['direct_instant_ms_per_call']} ms for the same answer without "
          f"litellm -> {client['litellm_floor_ms_per_call']} ms per call is litellm's fixed cost")
    for row in result["rows"]:
        if row.get("without_litellm"):
            continue
        share = row["llm_calls_per_trace"] * client["client_ms_per_call"]
        print(f"  {row['workers']} worker(s): {row['llm_calls_per_trace']} LLM calls per trace -> ~{share:.2f} ms of "
              f"the {row['worker_cpu_ms_per_trace']} ms per trace is litellm, "
              f"~{row['worker_cpu_ms_per_trace'] - share:.2f} ms everything else")
    steady = result["steady"]
    if steady:
        print(f"\nsteady: {steady['rate']:g} traces/s for {steady['seconds']:g} s "
              f"(achieved {steady['achieved_rate']}), "
              "one worker; trace -> version time beyond the modelled LLM time (which is not slept):")
        print(f"  p50 {steady['p50_s']} s, p99 {steady['p99_s']} s  (of which after the batch closed: "
              f"p50 {steady['after_close_p50_s']} s, p99 {steady['after_close_p99_s']} s)")
        print(f"  worker CPU {steady['worker_cpu_ms_per_trace']} ms/trace ({steady['worker_cpu_share']:.0%} of a core),"
              f" broker CPU {steady['broker_cpu_ms_per_trace']} ms/trace")
    if result["profile"]:
        print("\nWhere the CPU goes (in-process run, cProfile on process time):")
        print(result["profile"])
    write_results(args.out / "throughput.json", result)
    print(f"wrote {args.out / 'throughput.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
