"""A server run as a child process with its output in a log file (the embedded broker, the local model server), and
a free port for it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn that asks Linux to SIGKILL the child when its parent thread dies (best effort)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except Exception:
        return None
    parent_pid = os.getpid()

    def _preexec() -> None:
        pr_set_pdeathsig = 1
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # parent already gone between fork and prctl
            os._exit(1)

    return _preexec


def stop_processes(processes: Iterable[subprocess.Popen], timeout_s: float = 5.0) -> None:
    """SIGTERM every running process first (they shut down in parallel), then wait for each up to ``timeout_s``
    and SIGKILL the ones still running."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=timeout_s)


class LoggedChild:
    """One child process at a time, its stdout and stderr appended to ``<log dir>/<log name>``.

    The log directory is ``log_dir`` when given, else a temporary one (removed by :meth:`cleanup`). The child dies
    with the thread that spawned it (Linux), so spawn from a long-lived thread.
    """

    def __init__(self, temp_prefix: str, log_dir: str | os.PathLike[str] | None = None) -> None:
        self._temp_prefix = temp_prefix
        self._log_dir = Path(log_dir) if log_dir else None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self.log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        """The child's exit code if it has exited, else None."""
        return self._proc.poll() if self._proc is not None else None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code once the child has exited, waiting up to ``timeout_s``; None while it still runs."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def spawn(self, command: Sequence[str], log_name: str, env: Mapping[str, str] | None = None) -> None:
        """Start ``command`` with its output appended to the log file ``log_name``."""
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            log_dir = self._log_dir
        else:
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix=self._temp_prefix)
            log_dir = Path(self._tmpdir.name)
        self.log_path = log_dir / log_name
        self._log_file = open(self.log_path, "ab")  # closed in stop()
        self._proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            close_fds=True,
            preexec_fn=pdeathsig_preexec(),  # tiny, async-signal-safe enough
        )

    def log_tail(self, max_lines: int = 40) -> str:
        """The last lines of the log, for error messages."""
        if not self.log_path or not self.log_path.exists():
            return "(no log)"
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").splitlines()
            return "\n".join(lines[-max_lines:]) or "(log empty)"
        return "(log unreadable)"

    def report(self, headline: str, label: str) -> str:
        """``headline`` followed by the log's tail, for a start-up error: ``--- <label> log (<path>) ---``."""
        return f"{headline}\n--- {label} log ({self.log_path}) ---\n{self.log_tail()}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; close the log. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_processes([proc], timeout_s)
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None

    def cleanup(self) -> None:
        """Stop, then remove the temporary log directory (if one was made)."""
        self.stop()
        if self._tmpdir is not None:
            with contextlib.suppress(OSError):
                self._tmpdir.cleanup()
            self._tmpdir = None


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; racy by nature)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
