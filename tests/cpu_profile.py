"""Per-test wall and CPU, for finding where the suite's time goes (off unless loaded and asked).

`python -m pytest -p tests.cpu_profile --cpu-profile=PATH ...` (with or without pytest-xdist) writes to ``PATH`` a
JSON list, longest wall first, of ``{"nodeid", "worker", "wall_s", "cpu_s", "outcome"}`` per test, setup and
teardown included (a session fixture's start counts in the first test that asks for it). ``cpu_s`` is the CPU the
test's process tree used meanwhile: the process itself (user + system), its children it reaped, and the processes
still running under it (read from ``/proc``: their own CPU and their reaped children's). What a child that outlives
its parent uses after it is reparented is not seen. On a loaded machine wall is the load's, CPU is the comparison.
Each worker appends one JSON line per test to ``PATH.lines`` as it finishes (a stopped run keeps what it measured);
the controller gathers them into ``PATH`` at the end."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The live direct children of ``pid`` (every thread's ``children`` file), [] when it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _process_cpu_s(pid: int) -> float:
    """User + system CPU of a live process and of the children it has reaped, 0 when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return (utime + stime + cutime + cstime) / CLOCK_TICKS


def live_descendants_cpu_s(pid: int) -> float:
    """The CPU of every process still running under ``pid`` (children, their children...), reaped children included."""
    total, stack = 0.0, _children(pid)
    while stack:
        child = stack.pop()
        total += _process_cpu_s(child)
        stack += _children(child)
    return total


def tree_cpu_s() -> float:
    """This process's CPU, its reaped children's, and its live descendants'."""
    own = os.times()
    return own.user + own.system + own.children_user + own.children_system + live_descendants_cpu_s(os.getpid())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile", metavar="PATH", default=None,
                     help="write each test's wall and CPU (its process tree's) to PATH as JSON")


class CpuProfile:
    """Times each test's whole protocol (setup, call, teardown) and appends a line per test."""

    def __init__(self, lines: Path, worker: str) -> None:
        self.lines = lines
        self.worker = worker
        self.outcomes: dict[str, str] = {}  # node id -> "failed" or "skipped", from its phases' reports

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        wall_0, cpu_0 = time.perf_counter(), tree_cpu_s()
        try:
            return (yield)
        finally:
            wall, cpu = time.perf_counter() - wall_0, tree_cpu_s() - cpu_0
            row = {"nodeid": item.nodeid, "worker": self.worker, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                   "outcome": self.outcomes.pop(item.nodeid, "passed")}
            with self.lines.open("a") as out:
                out.write(json.dumps(row) + "\n")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed or (report.skipped and self.outcomes.get(item.nodeid) != "failed"):
            self.outcomes[item.nodeid] = report.outcome
        return report


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--cpu-profile")
    if path is None:
        return
    lines = Path(f"{path}.lines")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker == "main" and lines.exists():
        lines.unlink()
    config.pluginmanager.register(CpuProfile(lines, worker), "cpu-profile")


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.getoption("--cpu-profile")
    if path is None or "PYTEST_XDIST_WORKER" in os.environ:
        return
    lines = Path(f"{path}.lines")
    rows = [json.loads(line) for line in lines.read_text().splitlines()] if lines.exists() else []
    rows.sort(key=lambda row: -row["wall_s"])
    Path(path).write_text(json.dumps(rows, indent=1) + "\n")
