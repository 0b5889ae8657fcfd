"""The unit lane's time: collection and the README's fast command, serial and on pytest-xdist workers.

    python -m bench.unit_lane [--workers 0 2] [--code DIR] [--no-bytecode-cache] [--out bench/results/unit_lane.json]

Runs, in ``DIR`` (default: this checkout; e.g. ``git archive`` of the commit before a change, to compare), first
``python -m pytest tests/unit -m "not slow" --collect-only -q`` (which also writes the bytecode caches a developer's
second run finds), then the lane itself once per ``--workers`` value (0: one process; N: ``-n N --dist worksteal``).
For each: wall seconds, the CPU seconds (user + system) of pytest and every process it started (``os.wait4``),
the tests passed, and the machine's load average before and after. On a shared machine wall time follows the load;
CPU time much less, so compare CPU between checkouts and say the load with wall figures. ``--no-bytecode-cache``
runs with ``PYTHONDONTWRITEBYTECODE=1``: every module compiled and every test module's asserts rewritten again in
every process (what an environment that sets it pays); by default the variable is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

LANE = ["-m", "pytest", "tests/unit", "-m", "not slow", "-q"]


def run(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """Wall and CPU seconds of ``command`` and its children, its last line, and the load around it."""
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}: {last}")
    passed = re.search(r"(\d+) passed", last)
    collected = re.search(r"(\d+)/\d+ tests collected|(\d+) tests collected", last)
    return {"command": " ".join(["python", *command[1:]]), "wall_s": round(wall, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "user_s": round(usage.ru_utime, 2),
            "sys_s": round(usage.ru_stime, 2), "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "passed": int(passed.group(1)) if passed else None,
            "collected": int(next(g for g in collected.groups() if g)) if collected else None, "last_line": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--no-bytecode-cache", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(args.code)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    lane = [sys.executable, *LANE]
    runs = {"collect": run([*lane, "--collect-only"], args.code, env)}
    print(f"collect: {runs['collect']['last_line']}: wall {runs['collect']['wall_s']} s, "
          f"CPU {runs['collect']['cpu_s']} s (load {runs['collect']['load_before']})", flush=True)
    for workers in args.workers:
        extra = ["-n", str(workers), "--dist", "worksteal"] if workers else []
        figures = run([*lane, *extra], args.code, env)
        runs[f"workers_{workers}"] = figures
        print(f"{workers or 'no'} workers: {figures['last_line']}: wall {figures['wall_s']} s, CPU {figures['cpu_s']} s"
              f" (user {figures['user_s']}, sys {figures['sys_s']}; load {figures['load_before']} -> "
              f"{figures['load_after']})", flush=True)
    commit = subprocess.run(["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None  # None: not a git checkout (e.g. a git archive)
    result = {"code": str(args.code), "commit": commit, "bytecode_cache": not args.no_bytecode_cache,
              "cpus": os.cpu_count(), "python": platform.python_version(), "runs": runs}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
