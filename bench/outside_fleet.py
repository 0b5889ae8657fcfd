"""The stream as an outside fleet sends it (issue 44): separate processes, async agents naming the newest version.

    python -m bench.outside_fleet [--rate 20] [--seconds 60] [--split-stages] [--set NAME=VALUE ...]
                                  [--workers 1] [--playbooks 1] [--name outside_fleet] [--out bench/results]
    python -m bench.outside_fleet --targets [20x1,40x2,20x1-split]     # issue 44.4's cases, PASS/FAIL per target

Processes, as an operator runs them: ``combee broker --memory`` (its own state directory), ``combee worker`` (all
stages; ``--split-stages``: one ``combee worker --stages S`` per stage, so that ``/proc`` gives each stage's CPU) and
a fleet process of async agents (``streams.demo.fleet.Fleet``, mode async: ``rate`` agents, each taking 1 s per task
and naming the newest version it has seen, publishing through the public producer path, ``rate x seconds`` traces).
This process is the outside subscriber: it follows ``playbook`` and notes when it sees each version. ``--workers N
--playbooks M``: N worker processes and M fleet processes, one playbook each (on distinct partitions) at rate / M.

Settings: the project's defaults plus ``COMBEE_AUTO_BATCH_SIZE=true`` and ``COMBEE_FLEET_MODE=async`` (the simulator
at its default real, slept latency), and any ``--set`` (e.g. ``batch_close=size`` for the rule before issue 44).

Reported: p50 latency (trace sent -> the outside subscriber sees the first version whose lineage has it) over the
first and last fifth of the traces sent; the cycle, and the gap between versions; the drain (last version seen -
last trace sent) in cycles and in gaps; the out rate (traces learned per second from the first send to the last
version); batch sizes; a batch's close -> its version (``stats.delay_s``: waiting for the chain included) and the
LLM critical path of its version (p50); lost traces; CPU seconds per version of each process (``/proc/<pid>/stat``,
from the fleet's start to the last version); the load average before and after; the tail's versions (batch size,
closed, seen, its last trace sent, in seconds from the stream's last trace, and whether it closed ahead of the
chain, before the version before it was seen, which the context lag allows: where a slow drain's cause shows).
Targets (issue 44.4): last fifth p50 <= 1.5 x first fifth + 10 s, first fifth p50 <= 20 s, drained within 1.6
cycles; ``--targets`` prints one PASS/FAIL line per target and case. CPU per version by stage needs
``--split-stages`` (case ``20x1-split``).

**A cycle** is the p50 of a batch's own time: from when it could start (closed, and its context version out) to its
version (``combee_core.control.chain_costs``, ``own_s``; from each version's ``published_at`` and ``stats.delay_s``,
with the run's context lag). Built one after another (lag 0) that is the gap between versions when the chain is
busy; with two batches at once (lag 1, the default) versions come about twice as often as a batch takes, so the gap
(``gap_s``, the median gap between versions seen, the earlier sessions' "cycle") halves while the trailing batch's
own time, which a drain always contains, does not (docs/architecture.md, "Context lag"). Both are reported, and the
drain in both; the target counts cycles. Also reported: the controller's targets, from the worker logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from bench.sustained import parse_sets, percentile

PLAYBOOK = "fleet"
STAGES = ("reflect", "batch", "aggregate", "reduce", "control", "guard")
DEFAULTS = {"COMBEE_AUTO_BATCH_SIZE": "true", "COMBEE_FLEET_MODE": "async", "COMBEE_LOG_LEVEL": "INFO"}
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMBEE_")}
    return {**env, **DEFAULTS, **extra}


class OutsideRun:
    """The broker, the worker process(es) and the fleet process, each started as an operator would."""

    def __init__(self, overrides: dict[str, str], split: bool, log_dir: Path, workers: int = 1) -> None:
        self.worker_count = workers
        self.log_dir = log_dir
        self.prefix = f"out{uuid.uuid4().hex[:8]}."
        self.env = {"COMBEE_STATE_DIR": str(log_dir / "state"), "COMBEE_TOPIC_PREFIX": self.prefix,
                    **{f"COMBEE_{k.upper()}": v for k, v in overrides.items()}}
        self.split = split
        self.processes: dict[str, subprocess.Popen] = {}
        self.bootstrap = ""

    def start_broker(self) -> None:
        broker = subprocess.Popen([sys.executable, "-m", "streams.cli", "broker", "--memory"], env=child_env(self.env),
                                  stdout=subprocess.PIPE, stderr=open(self.log_dir / "broker.log", "wb"), text=True)
        self.processes["broker"] = broker
        assert broker.stdout is not None
        self.bootstrap = broker.stdout.readline().strip()
        if not self.bootstrap:
            raise RuntimeError(f"the broker did not start: {(self.log_dir / 'broker.log').read_text()[-2000:]}")
        self.env["COMBEE_KAFKA_BOOTSTRAP"] = self.bootstrap

    def start(self, name: str, args: list[str]) -> None:
        log = open(self.log_dir / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen([sys.executable, "-m", *args], env=child_env(self.env), stdout=log,
                                                stderr=subprocess.STDOUT)
        log.close()

    def start_workers(self) -> None:
        if self.split:
            for stage in STAGES:
                self.start(stage, ["streams.cli", "worker", "--stages", stage, "--health-port", "0"])
        else:
            for name in self.workers():
                self.start(name, ["streams.cli", "worker", "--health-port", "0"])

    def workers(self) -> list[str]:
        return list(STAGES) if self.split else [f"worker{n}" for n in range(self.worker_count)]

    async def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        for name in self.workers():
            while True:
                self.check_alive()
                found = re.search(rb"health on :(\d+)", (self.log_dir / f"{name}.log").read_bytes())
                if found and await _ready(int(found.group(1))):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready after {timeout_s:.0f} s")
                await asyncio.sleep(0.5)

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if not name.startswith("fleet") and process.poll() is not None:
                log = self.log_dir / f"{name}.log"
                raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-3000:]}")

    def cpu(self) -> dict[str, float]:
        return {name: cpu_s(process.pid) for name, process in self.processes.items()}

    def stop(self) -> None:
        for name in [n for n in self.processes if n != "broker"] + ["broker"]:  # the broker last
            process = self.processes.get(name)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()


async def _ready(port: int) -> bool:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
        writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        return b" 200 " in head
    except (OSError, TimeoutError):
        return False


async def measure(rate: float, seconds: float, split: bool, overrides: dict[str, str], workers: int = 1,
                  playbooks: int = 1) -> dict[str, Any]:
    from combee_core.models import PlaybookVersion
    from combee_core.settings import CombeeSettings
    from streams.broker.profile import BrokerProfile
    from streams.topology.follower import PlaybookFollower

    log_dir = Path(tempfile.mkdtemp(prefix="outside-fleet-"))
    from bench.sustained import playbook_ids

    run = OutsideRun(overrides, split, log_dir, workers)
    names = playbook_ids(playbooks, int(overrides.get("partitions", 4)))
    seen: dict[tuple[str, int], tuple[float, PlaybookVersion]] = {}
    load_before = os.getloadavg()
    try:
        run.start_broker()
        run.start_workers()
        settings = CombeeSettings.load(env={k: v for k, v in child_env(run.env).items() if k.startswith("COMBEE_")})
        profile = BrokerProfile.for_tansu()
        await run.wait_ready()

        def on_version(version: PlaybookVersion) -> None:
            if version.playbook_id in names:
                seen.setdefault((version.playbook_id, version.version), (time.time(), version))

        async with PlaybookFollower(settings, run.bootstrap, profile, on_version=on_version,
                                    check_alive=run.check_alive):
            cpu_start = run.cpu()
            started = time.time()
            for name in names:
                sent_file = str(log_dir / f"sent-{name}.json")
                run.start(f"fleet-{name}", ["bench.outside_fleet", "--agents-only", "--rate", str(rate / playbooks),
                                            "--seconds", str(seconds), "--sent-file", sent_file,
                                            "--bootstrap", run.bootstrap, "--playbook", name])
            sent: dict[str, float] = {}
            for name in names:
                fleet = run.processes[f"fleet-{name}"]
                while fleet.poll() is None:
                    run.check_alive()
                    await asyncio.sleep(1.0)
                if fleet.returncode != 0:
                    raise RuntimeError(f"the fleet failed: {(log_dir / f'fleet-{name}.log').read_text()[-3000:]}")
                sent.update(json.loads((log_dir / f"sent-{name}.json").read_text()))
            stream_end = max(sent.values())
            deadline = time.monotonic() + max(300.0, 5 * seconds)
            while time.monotonic() < deadline:
                run.check_alive()
                if set(sent) <= {t for _, v in seen.values() for t in v.lineage}:
                    break
                await asyncio.sleep(0.5)
            cpu_end = run.cpu()
    finally:
        run.stop()
    return {**summarise(rate, seconds, split, sent, seen, stream_end, started, cpu_start, cpu_end, load_before,
                        log_dir, overrides), "workers": workers, "playbooks": names}


def summarise(rate, seconds, split, sent, seen, stream_end, started, cpu_start, cpu_end, load_before, log_dir,
              overrides) -> dict[str, Any]:
    landed: dict[str, float] = {}
    for number in sorted(seen):
        at, version = seen[number]
        for trace_id in version.lineage:
            landed.setdefault(trace_id, at)
    order = sorted(sent, key=lambda t: sent[t])
    fifth = max(1, len(order) // 5)

    def p50(ids: list[str]) -> float:
        return percentile([landed[t] - sent[t] for t in ids if t in landed], 0.5)

    times = sorted(at for at, _ in seen.values())
    gaps = []
    for playbook in {key[0] for key in seen}:
        mine = sorted(at for key, (at, _) in seen.items() if key[0] == playbook)
        gaps += [b - a for a, b in zip(mine, mine[1:])]
    gap = statistics.median(gaps) if gaps else float("nan")
    own = batch_cycles(seen, context_lag(overrides))
    cycle = statistics.median(own) if own else float("nan")
    drain = times[-1] - stream_end if times else float("nan")
    first, last = p50(order[:fifth]), p50(order[-fifth:])
    versions = len(seen)
    cpu = {name: round((cpu_end.get(name, 0.0) - cpu_start.get(name, 0.0)) / max(1, versions), 2)
           for name in cpu_end}
    sizes = [v.stats.batch_size for _, v in (seen[n] for n in sorted(seen))]
    close_to_version = percentile([v.stats.delay_s for _, v in seen.values()], 0.5)
    critical_path = percentile([v.stats.llm_critical_path_s or 0.0 for _, v in seen.values()], 0.5)
    # ahead: the batch closed before the version before it was seen (the context lag, chain_pacing)
    tail = [dict(version=n[1], batch=v.batch_id, size=v.stats.batch_size,
                 closed_s=round(at - v.stats.delay_s - stream_end, 1), seen_s=round(at - stream_end, 1),
                 last_sent_s=round(max((sent[t] for t in v.lineage if t in sent), default=stream_end) - stream_end, 1),
                 ahead=bool(at - v.stats.delay_s < seen.get((n[0], n[1] - 1), (0.0,))[0]))
            for n, (at, v) in sorted(seen.items(), key=lambda item: item[1][0]) if at - stream_end > -2 * cycle]
    lines, chosen = [], []
    for path in sorted(log_dir.glob("*.log")):
        text = path.read_text(errors="replace")
        lines += [line for line in text.splitlines() if "WARNING" in line]
        chosen += [int(n) for n in re.findall(r"controller: \S+ batch size -> (\d+)", text)]
    return dict(
        rate=rate, seconds=seconds, split_stages=split, settings=overrides, traces=len(order), versions=versions,
        first_fifth_p50_s=round(first, 1), last_fifth_p50_s=round(last, 1), cycle_s=round(cycle, 1),
        gap_s=round(gap, 1), drain_s=round(drain, 1),
        drain_cycles=round(drain / cycle, 2) if cycle == cycle and cycle > 0 else None,
        drain_gaps=round(drain / gap, 2) if gap == gap and gap > 0 else None, controller_targets=chosen,
        out_rate=round(len(landed) / (times[-1] - min(sent.values())), 2) if times else 0.0,
        lost=len(set(sent) - set(landed)), batch_sizes=sizes,
        close_to_version_p50_s=round(close_to_version, 1), llm_critical_path_p50_s=round(critical_path, 1),
        cpu_s_per_version=cpu, tail=tail, wall_s=round((times[-1] if times else time.time()) - started, 1),
        targets=dict(last_vs_first=bool(last <= 1.5 * first + 10), first_within_20s=bool(first <= 20),
                     drained_within_1_6_cycles=bool(cycle > 0 and drain <= 1.6 * cycle)),
        warnings=len(lines), warning_examples=sorted({line[-160:] for line in lines})[:5],
        load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()],
        logs=str(log_dir),
    )


def context_lag(overrides: dict[str, str]) -> int:
    """The run's context lag: the default, or ``--set context_lag=N``."""
    from combee_core.settings import CombeeSettings

    return CombeeSettings.load(env={f"COMBEE_{k.upper()}": v for k, v in overrides.items()
                                    if k == "context_lag"}).context_lag


def batch_cycles(seen: dict[tuple[str, int], tuple[float, Any]], lag: int) -> list[float]:
    """Each version's batch's own time (closed or context out -> published), per playbook in version order."""
    from combee_core.control.chain_costs import ChainTimes

    own, chains = [], {}
    for (playbook, _), (_, version) in sorted(seen.items()):
        published = version.published_at.timestamp()
        chain = chains.setdefault(playbook, ChainTimes())
        own.append(chain.cost(version.batch_id, published - version.stats.delay_s, published, None, lag).own_s)
    return own


async def run_fleet(rate: float, seconds: float, sent_file: Path, bootstrap: str, playbook: str = PLAYBOOK) -> None:
    """The fleet process: ``rate`` async agents, 1 s per task, each naming the newest version it has seen."""
    from combee_core.settings import CombeeSettings
    from combee_core.sim.task_suite import build_suite
    from streams.broker.profile import BrokerProfile
    from streams.demo.fleet import Fleet, FleetConfig
    from streams.topology.follower import PlaybookFollower

    settings = CombeeSettings.load()
    profile = BrokerProfile.for_tansu()
    sent: dict[str, float] = {}
    config = FleetConfig(playbook_id=playbook, agents=max(1, int(rate)), mode="async", traces=int(rate * seconds),
                         task_time_s=max(1, int(rate)) / rate)
    async with PlaybookFollower(settings, bootstrap, profile) as follower:
        fleet = Fleet(settings, bootstrap, profile, build_suite(seed=7), follower, config,
                      on_traces=lambda traces: sent.update({t.trace_id: time.time() for t in traces}))
        await fleet.run()
    sent_file.write_text(json.dumps(sent))


CASES = {
    "20x1": dict(rate=20.0, workers=1, playbooks=1, split=False),
    "40x2": dict(rate=40.0, workers=2, playbooks=2, split=False),
    "20x1-split": dict(rate=20.0, workers=1, playbooks=1, split=True),
}
"""``--targets``: issue 44.4's two cases (20 traces/s on one worker and one playbook; 40 traces/s on two workers, two
playbooks of 20/s each), then the first again with one process per stage, for the CPU per version by stage."""


def verdict(name: str, row: dict[str, Any]) -> list[str]:
    """The target lines of one run, each PASS or FAIL with its figures."""
    first, last, cycle, gap = row["first_fifth_p50_s"], row["last_fifth_p50_s"], row["cycle_s"], row["gap_s"]
    targets = row["targets"]

    def mark(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    head = (f"{name}: {row['rate']:g} traces/s, {row['workers']} worker(s), {len(row['playbooks'])} playbook(s)"
            f"{', stages split' if row['split_stages'] else ''}; load {row['load_before'][0]} -> "
            f"{row['load_after'][0]}; {row['versions']} versions, {row['lost']} lost")
    return [head,
            f"  {mark(targets['first_within_20s'])} first fifth p50 {first} s <= 20 s",
            f"  {mark(targets['last_vs_first'])} last fifth p50 {last} s <= 1.5 x {first} + 10 = "
            f"{1.5 * first + 10:.1f} s",
            f"  {mark(targets['drained_within_1_6_cycles'])} drain {row['drain_s']} s = {row['drain_cycles']} cycles "
            f"of {cycle} s <= 1.6 (a batch's own close -> version; {row['drain_gaps']} gaps between versions of "
            f"{gap} s)",
            f"  controller targets: {row['controller_targets']}",
            "  CPU s per version: " + ", ".join(f"{k} {v}" for k, v in row["cpu_s_per_version"].items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--split-stages", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--name", default="outside_fleet")
    parser.add_argument("--agents-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sent-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--playbook", default=PLAYBOOK, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--playbooks", type=int, default=1)
    parser.add_argument("--targets", nargs="?", const=",".join(CASES), metavar="CASES",
                        help=f"run issue 44's target cases ({', '.join(CASES)}; all by default) one after the other "
                        "and print PASS/FAIL per target; --rate/--workers/--playbooks/--split-stages are then ignored")
    args = parser.parse_args(argv)
    if args.agents_only:
        asyncio.run(run_fleet(args.rate, args.seconds, args.sent_file, args.bootstrap, args.playbook))
        return 0
    overrides = parse_sets(args.set)
    if args.targets is None:
        cases = {args.name: dict(rate=args.rate, workers=args.workers, playbooks=args.playbooks,
                                 split=args.split_stages)}
    else:
        unknown = [c for c in args.targets.split(",") if c not in CASES]
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
        cases = {f"{args.name}_{c}": CASES[c] for c in args.targets.split(",")}
    rows, report = [], []
    for name, case in cases.items():
        row = asyncio.run(measure(case["rate"], args.seconds, case["split"], overrides, case["workers"],
                                  case["playbooks"]))
        rows.append({"case": name, **row})
        write_results(args.out / f"{args.name}.json", dict(machine=machine(), rows=rows))
        print(json.dumps({k: v for k, v in row.items() if k not in ("batch_sizes", "tail")}, indent=1))
        print("batch sizes:", row["batch_sizes"])
        print("tail (s from the last trace sent):", json.dumps(row["tail"]))
        report += verdict(name, row)
    print("\n".join(["", "issue 44.4 targets:", *report]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
