"""A ``combee`` command timed from its first contact with a broker: where the interpreter's start ends (15-30 s of
wall at load 25-40, and not the same for two commands started together) and what the command promises begins.

The command runs unchanged (``python -m streams.cli``'s ``__main__``), under an audit hook (:pep:`578`) that writes
``time.monotonic()`` at its first ``connect()`` to the given port into a file; on Linux that clock is one for every
process, so the test compares it with its own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIRST_CONNECT = """
import os, runpy, sys, time
port, clock = int(sys.argv[1]), sys.argv[2]
def first_connect(event, args):
    if event == "socket.connect" and args[1][1:2] == (port,) and not os.path.exists(clock):
        with open(clock, "w") as out:
            out.write(repr(time.monotonic()))
sys.addaudithook(first_connect)
sys.argv = ["combee", *sys.argv[3:]]
runpy.run_module("streams.cli", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class TimedRun:
    code: int
    out: str
    err: str
    started: float
    """``time.monotonic()`` when the test started the process."""
    first_contact: float
    """``time.monotonic()`` at the command's first connection attempt to the port."""
    exited: float
    """``time.monotonic()`` when the test saw it exit."""

    @property
    def start_up_s(self) -> float:
        """The interpreter's start and the imports, until the command first reaches for the broker."""
        return self.first_contact - self.started

    @property
    def from_contact_s(self) -> float:
        """From its first connection attempt to its exit: what it waits for and what its exit costs."""
        return self.exited - self.first_contact


async def combee_timed(*args: str, port: int, clock: Path, env: dict[str, str], timeout_s: float) -> TimedRun:
    """Run ``combee *args``; ``clock`` is a file of this test's own (it must not exist yet). Fails when the command
    runs longer than ``timeout_s`` or never tries to connect to ``port``."""
    assert not clock.exists(), clock
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", FIRST_CONNECT, str(port), str(clock), *args,
                                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    talk = asyncio.create_task(process.communicate())
    done, _ = await asyncio.wait([talk], timeout=timeout_s)
    exited = time.monotonic()
    if not done:
        process.kill()
        _, err = await talk  # what it wrote before it was killed
        raise AssertionError(f"combee {args[0]} still running after {timeout_s:.0f} s; its stderr: "
                             f"{err.decode()[-3000:]}")
    out, err = talk.result()
    assert clock.exists(), f"combee {args[0]} never tried to connect to port {port}: {err.decode()[-2000:]}"
    assert process.returncode is not None
    return TimedRun(process.returncode, out.decode(), err.decode(), started, float(clock.read_text()), exited)
