"""Start-up: how long each command takes before it answers, in wall and CPU seconds, and what its imports cost.

    python -m bench.startup [--repeat 3] [--skip-demo] [--litellm] [--code DIR] [--out bench/results/startup.json]

Runs each command as a user does (``python -m streams.cli ...``, i.e. ``combee``) against one broker
(``KAFKA_BOOTSTRAP_SERVERS``, else an embedded Tansu started here, as the tests do) and stops the clock when it
answers:

- ``--help``, ``status``: when the process exits;
- ``tail``: when it prints that it follows the playbook topic;
- ``worker`` (every stage, the simulator): when it prints ``worker: ready`` (every stage joined its group);
- ``demo`` (its default fleet, the simulator): when it prints the ``fleet running`` phase.

CPU is the process's user + system seconds at that moment (``/proc/PID/stat``; the broker's own CPU is not counted).
Each run gets fresh topic names. The machine's load average is printed with every run: on a shared machine wall
time follows the load, CPU time much less. Then ``python -X importtime`` tables: the top-level imports of the
command line and of a worker's start (``streams.topology.worker``, with the role layer the simulator path imports),
and, with ``--litellm``, of ``litellm`` itself (seconds; no process that never calls a provider imports it).
``--code DIR`` measures the commands of another checkout (e.g. the commit before a change): they run in ``DIR``
with ``PYTHONPATH=DIR`` (``python -m`` puts the working directory first on the path).
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import machine, start_broker, write_results
from bench.throughput import cpu_s

COMMAND = [sys.executable, "-m", "streams.cli"]
TARGETS_S = {"help": 2.0, "status": 2.0, "tail": 2.0, "worker": 5.0, "demo": 5.0}
"""Issue 43's targets on an idle 2-core machine: seconds from the command's start to its answer."""
DEADLINE_S = 300.0
"""A command that has not answered by then counts as failed (a loaded machine is slow, not this slow)."""


@dataclass(frozen=True)
class Case:
    name: str
    args: list[str]
    marker: str | None
    """A line (on stdout or stderr) that means the command answered; None: when it exits."""


@dataclass(frozen=True)
class Measured:
    case: str
    wall_s: float
    cpu_s: float
    load_1m: float
    ok: bool


def cases(bootstrap: str, tag: str, skip_demo: bool, out: Path) -> list[Case]:
    common = ["--bootstrap", bootstrap]
    listed = [
        Case("help", ["--help"], None),
        Case("status", ["status", *common, "--prefix", f"startup-{tag}-status-"], None),
        Case("tail", ["tail", *common, "--prefix", f"startup-{tag}-tail-"], "tail: following"),
        Case("worker", ["worker", *common, "--prefix", f"startup-{tag}-worker-"], "worker: ready"),
    ]
    if not skip_demo:
        listed.append(Case("demo", ["demo", *common, "--prefix", f"startup-{tag}-demo-", "--plain",
                                    "--out", str(out / f"demo-{tag}")], "fleet running"))
    return listed


def child_env(code: Path | None) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **({"PYTHONPATH": str(code)} if code else {})}


def measure(case: Case, code: Path | None = None) -> Measured:
    """Run ``case`` once; stop it (SIGINT, then SIGKILL) once it answered."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    process = subprocess.Popen([*COMMAND, *case.args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=child_env(code), cwd=code)
    assert process.stdout is not None
    ok, cpu = False, float("nan")
    buffered = b""
    try:
        while time.monotonic() - started < DEADLINE_S:
            ready, _, _ = select.select([process.stdout], [], [], 0.02)
            chunk = os.read(process.stdout.fileno(), 65536) if ready else b""
            buffered = (buffered + chunk)[-65536:]
            if case.marker is not None and case.marker.encode() in buffered:
                cpu, ok = cpu_s(process.pid), True
                break
            if ready and not chunk:  # end of output: the process is exiting
                _, status, usage = os.wait4(process.pid, 0)
                process.returncode = os.waitstatus_to_exitcode(status)
                cpu, ok = usage.ru_utime + usage.ru_stime, case.marker is None and process.returncode == 0
                break
        wall = time.monotonic() - started
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if not ok:
        print(f"  {case.name}: did not answer as expected; its last output:\n"
              f"{buffered.decode(errors='replace')[-2000:]}", file=sys.stderr)
    return Measured(case.name, round(wall, 3), round(cpu, 3), round(load, 2), ok)


IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_table(statement: str, top: int = 12, code: Path | None = None) -> list[tuple[str, float, float]]:
    """The ``top`` heaviest entries of ``python -X importtime -c statement``: (module, cumulative seconds, own
    seconds), heaviest first; a module's cumulative time includes the modules it imported first (listed too)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True,
                          timeout=DEADLINE_S, env=child_env(code), cwd=code)
    rows = []
    for line in done.stderr.splitlines():
        if (match := IMPORT_LINE.match(line)) is not None:
            own, total, _, module = match.groups()
            rows.append((module, int(total) / 1e6, int(own) / 1e6))
    heaviest = sorted(rows, key=lambda row: -row[1])
    return [(module, round(total, 3), round(own, 3)) for module, total, own in heaviest[:top]]


IMPORTS = {
    "command line (`import streams.cli`)": "import streams.cli",
    "a worker's start on the simulator (the command line, the worker, its roles made)":
        "import streams.cli, streams.topology.worker; from combee_core.settings import CombeeSettings; "
        "from streams.topology.llm_setup import build_llm_roles; build_llm_roles(CombeeSettings())",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--litellm", action="store_true", help="also time `import litellm` (seconds)")
    parser.add_argument("--code", type=Path, help="run the commands of this checkout (PYTHONPATH)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/startup.json"))
    args = parser.parse_args(argv)
    broker = start_broker()
    runs: list[Measured] = []
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"combee-startup-{uuid.uuid4().hex[:8]}"
    try:
        for round_number in range(args.repeat):
            for case in cases(broker.bootstrap, f"{uuid.uuid4().hex[:6]}{round_number}", args.skip_demo, work):
                runs.append(result := measure(case, args.code))
                print(f"{case.name:7} wall {result.wall_s:6.2f} s  cpu {result.cpu_s:6.2f} s  "
                      f"load {result.load_1m:5.2f}  {'ok' if result.ok else 'FAILED'}", flush=True)
    finally:
        broker.stop()
    summary = {}
    print(f"\n{'command':8} {'median wall':>12} {'median cpu':>11} {'target':>7}  runs")
    for name, target in TARGETS_S.items():
        mine = [r for r in runs if r.case == name and r.ok]
        if not mine:
            continue
        wall, cpu = statistics.median(r.wall_s for r in mine), statistics.median(r.cpu_s for r in mine)
        summary[name] = {"median_wall_s": wall, "median_cpu_s": cpu, "target_s": target, "runs": len(mine)}
        print(f"{name:8} {wall:11.2f}s {cpu:10.2f}s {target:6.1f}s  {len(mine)}")
    tables = {title: import_table(statement, code=args.code) for title, statement in IMPORTS.items()}
    if args.litellm:
        tables["litellm (`import litellm`, offline price map)"] = import_table(
            "import os; os.environ.setdefault('LITELLM_LOCAL_MODEL_COST_MAP', 'True'); import litellm", top=6)
    for title, rows in tables.items():
        print(f"\npython -X importtime: {title}\n| module | cumulative s | own s |\n|---|---:|---:|")
        for module, total, own in rows:
            print(f"| `{module}` | {total:.3f} | {own:.3f} |")
    write_results(args.out, {"machine": machine(), "code": str(args.code or "."), "runs": [asdict(r) for r in runs],
                             "summary": summary, "import_tables": tables})
    print(f"\nwrote {args.out}")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
