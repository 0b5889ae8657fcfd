"""The durable embedded broker, the default of ``combee broker``: SeaweedFS (the storage, :mod:`streams.broker.seaweed`)
and Tansu on ``s3://`` in front of it, supervised as one service, their data under the state directory.

Start: the storage first, until its S3 gateway serves the bucket; the tails of writes a kill tore are cut
(:mod:`streams.broker.torn_tails`); then Tansu, until it answers Kafka. While it runs: a storage process that dies
is restarted, and Tansu with it, the same way and on the same ports (clients reconnect; their produces fail until
both are back), at most :attr:`DurableBroker.storage_restarts` times within ``restart_window_s``; a Tansu that
dies, or a storage that keeps dying, ends the service with one line saying which and why. One service per state
directory: a lock file refuses a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from streams.broker.errors import BrokerAlreadyRunning
from streams.broker.retention import RetentionPass, apply_retention
from streams.broker.seaweed import BUCKET, STORAGE_PORTS, SeaweedStorage, choose_ports, port_free
from streams.broker.state import BrokerRecord
from streams.broker.stopping import stopped_within
from streams.broker.tansu import DEFAULT_CLUSTER_ID, EmbeddedBroker
from streams.broker.torn_tails import BucketClient, Repair, TornTailRepairError, repair_torn_tails

DATA_SUBDIR = "broker"
"""Under the state directory: ``seaweedfs/`` (the data), ``logs/``, ``ports.json`` (reused when free), ``lock``."""

DURABLE_STORAGE = f"s3://{BUCKET}/"

TANSU_STOP_S = 5.0
"""Seconds Tansu gets to exit on SIGTERM (it waits for connected clients) before it is killed."""
RETENTION_S = 7 * 86400.0
"""Default age after which batches of ``traces``, ``llm-calls`` and ``dlq`` go (Kafka's default ``retention.ms``)."""
RETENTION_EVERY_S = 600.0
"""Seconds between two retention passes while the broker runs (one runs at each start)."""
STORAGE_STOP_S = 10.0
"""Seconds SeaweedFS gets to close its volumes on SIGTERM before it is killed."""


def describe_exit(code: int) -> str:
    """``was killed by SIGKILL`` or ``exited with code N``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class StateDirLock:
    """An exclusive ``flock`` on ``<data dir>/lock`` (released by the kernel when the process dies, even by
    SIGKILL), holding the owner's pid for the refusal message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # kept open while the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            handle.close()
            raise BrokerAlreadyRunning(
                f"another combee broker (pid {owner}) already runs on {self.path.parent}; stop it first, or set "
                f"COMBEE_STATE_DIR to another directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class DurableBroker:
    """SeaweedFS + Tansu on ``s3://tansu/``, data in ``<state_dir>/broker``; Kafka on ``port`` (default: the
    previous run's when free, so clients reconnect to the same address, else a free one)."""

    def __init__(self, state_dir: Path, port: int | None = None, *, host: str = "127.0.0.1",
                 startup_timeout_s: float = 60.0, storage_restarts: int = 3, restart_window_s: float = 60.0,
                 advertised: str | None = None, fsync: bool = True, retention_s: float | None = RETENTION_S,
                 retention_every_s: float = RETENTION_EVERY_S) -> None:
        self.data_dir = Path(state_dir) / DATA_SUBDIR
        self.host = host
        self._requested_port = port
        self.advertised = advertised
        """``host:port`` Tansu gives clients in metadata (a TLS terminator in front of it); default its own."""
        self.startup_timeout_s = startup_timeout_s
        self.fsync = fsync
        """Every write synced to disk before SeaweedFS answers it (docs/broker.md, "What survives what")."""
        self.retention_s = retention_s
        """Age (s) after which the growing topics' batches go (:mod:`streams.broker.retention`); None: never."""
        self.retention_every_s = retention_every_s
        self._retention_due = 0.0
        self._retention_task: asyncio.Task[None] | None = None
        self.storage_restarts = storage_restarts
        self.restart_window_s = restart_window_s
        self._lock = StateDirLock(self.data_dir / "lock")
        self.storage: SeaweedStorage | None = None
        self.tansu: EmbeddedBroker | None = None
        self._restarts: list[float] = []
        self.repairs: list[Repair] = []
        """Partitions whose torn tail was cut at this start (:mod:`streams.broker.torn_tails`)."""
        self.start_seconds: float | None = None

    @property
    def storage_dir(self) -> Path:
        return self.data_dir / "seaweedfs"

    @property
    def ports_path(self) -> Path:
        return self.data_dir / "ports.json"

    @property
    def bootstrap(self) -> str:
        assert self.tansu is not None
        return self.tansu.bootstrap

    @property
    def ports(self) -> dict[str, int]:
        assert self.storage is not None and self.tansu is not None and self.tansu.port is not None
        return {"kafka": self.tansu.port, **self.storage.ports}

    def _previous_ports(self) -> dict[str, int]:
        with contextlib.suppress(OSError, ValueError):
            ports = json.loads(self.ports_path.read_text())
            return {k: int(v) for k, v in ports.items() if isinstance(v, int)}
        return {}

    def claim(self) -> None:
        """Take the data directory (refused in one line when another broker holds it). :meth:`start` does it too."""
        if self._lock.held:
            return
        self._lock.acquire()

    async def start(self) -> DurableBroker:
        """Lock the data directory, start the storage and wait until it serves the bucket, then Tansu."""
        t0 = time.monotonic()
        self.claim()
        try:
            previous = self._previous_ports()
            ports = choose_ports({k: v for k, v in previous.items() if k in STORAGE_PORTS}, self.host)
            self.storage = SeaweedStorage(self.storage_dir, ports, self.host, self.startup_timeout_s,
                                          fsync=self.fsync)
            await self.storage.start_async()  # spawned from the event loop's thread: it dies with this process
            client = BucketClient(self.host, ports["s3"], BUCKET)
            self.repairs = await asyncio.to_thread(repair_torn_tails, client, DEFAULT_CLUSTER_ID)
            kafka_port = self._requested_port
            if kafka_port is None and previous.get("kafka") and port_free(self.host, previous["kafka"]) \
                    and previous["kafka"] not in ports.values():
                kafka_port = previous["kafka"]
            self.tansu = self._tansu(kafka_port)
            await self.tansu.start_async()
            self.ports_path.write_text(json.dumps(self.ports, indent=1) + "\n")
        except BaseException:
            await self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _tansu(self, port: int | None) -> EmbeddedBroker:
        assert self.storage is not None
        return EmbeddedBroker(port=port, host=self.host, storage=DURABLE_STORAGE, extra_env=self.storage.tansu_env(),
                              log_dir=self.data_dir / "logs", startup_timeout_s=self.startup_timeout_s,
                              advertised=self.advertised)

    def record(self) -> BrokerRecord:
        assert self.storage is not None and self.tansu is not None
        return BrokerRecord.now(self.bootstrap, DURABLE_STORAGE, data_dir=str(self.data_dir),
                                storage_endpoint=self.storage.endpoint, ports=self.ports,
                                child_pids={"tansu": self.tansu.pid, "storage": self.storage.pid})

    async def apply_retention(self) -> RetentionPass:
        """One retention pass now (nothing when retention is off)."""
        assert self.storage is not None
        if self.retention_s is None:
            return RetentionPass()
        client = BucketClient(self.host, self.storage.ports["s3"], BUCKET)
        return await asyncio.to_thread(apply_retention, client, DEFAULT_CLUSTER_ID, self.retention_s, time.time())

    def _retention_when_due(self, notify: Callable[[str], None]) -> None:
        """Start a pass in the background when one is due (a pass over a large bucket takes a while: the
        supervision goes on meanwhile)."""
        running = self._retention_task is not None and not self._retention_task.done()
        if self.retention_s is None or running or time.monotonic() < self._retention_due:
            return
        self._retention_due = time.monotonic() + self.retention_every_s
        self._retention_task = asyncio.create_task(self._retention_pass(notify))

    async def _retention_pass(self, notify: Callable[[str], None]) -> None:
        assert self.retention_s is not None
        try:
            done = await self.apply_retention()
        except (TornTailRepairError, ValueError, SyntaxError) as error:  # the storage away, or an answer it could
            notify(f"combee broker: retention pass skipped: {error!r}")  # not read: the next pass tries again
            return
        if done.deleted:
            notify(f"combee broker: retention ({self.retention_s / 3600:g} h) deleted {done.summary()}")

    async def supervise(self, stop: asyncio.Event, notify: Callable[[str], None],
                        restarted: Callable[[], object] = lambda: None, poll_s: float = 0.5) -> str | None:
        """Watch both processes until ``stop`` is set (None) or the service must end (the one-line reason).
        A dead storage process is restarted with Tansu (``notify`` says so; then ``restarted()``), Tansu's death
        ends the service."""
        assert self.storage is not None and self.tansu is not None
        while not stop.is_set():
            code = self.tansu.exit_code()
            if code is not None:
                return (f"the Tansu broker process at {self.bootstrap} {describe_exit(code)}; last log line: "
                        f"{self.tansu.log_tail(1).strip() or '(none)'}")
            code = self.storage.exit_code()
            if code is not None:
                reason = await self._restart_storage(code, notify)
                if reason is not None:
                    return reason
                restarted()
            self._retention_when_due(notify)
            await stopped_within(stop, poll_s)
        return None

    async def _restart_storage(self, code: int, notify: Callable[[str], None]) -> str | None:
        assert self.storage is not None
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < self.restart_window_s] + [now]
        what = f"the storage process (SeaweedFS, pid {self.storage.pid}, {self.storage_dir}) {describe_exit(code)}"
        last = self.storage.log_tail(1).strip() or "(none)"
        if len(self._restarts) > self.storage_restarts:
            return (f"{what}, {len(self._restarts)} times within {self.restart_window_s:.0f} s; last log line: "
                    f"{last}")
        notify(f"combee broker: {what}; restarting it and Tansu on the same ports ({len(self._restarts)} of "
               f"{self.storage_restarts} within {self.restart_window_s:.0f} s); produces fail until they are back")
        started = time.monotonic()
        await self._restart_all()
        assert self.tansu is not None
        notify(f"combee broker: storage (pid {self.storage.pid}) and Tansu (pid {self.tansu.pid}) back after "
               f"{time.monotonic() - started:.1f} s")
        return None

    async def _restart_all(self) -> None:
        """Tansu stopped, the storage started again, torn tails cut, Tansu started again: Tansu is not running
        while tails are cut (a running one may be between its watermark and its batch, :mod:`torn_tails`)."""
        assert self.storage is not None and self.tansu is not None
        await self.tansu.stop_async(TANSU_STOP_S)
        self.storage.stop(0)
        await self.storage.start_async()
        client = BucketClient(self.host, self.storage.ports["s3"], BUCKET)
        self.repairs = await asyncio.to_thread(repair_torn_tails, client, DEFAULT_CLUSTER_ID)
        self.tansu = self._tansu(self.tansu.port)  # the same address: its clients reconnect
        await self.tansu.start_async()

    async def stop(self) -> None:
        """Tansu first (it may still be writing), then the storage; release the lock. Idempotent."""
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TornTailRepairError):
                await self._retention_task
        if self.tansu is not None:
            await self.tansu.stop_async(TANSU_STOP_S)
        if self.storage is not None:
            await asyncio.to_thread(self.storage.stop, STORAGE_STOP_S)
        self._lock.release()


def storage_report(record: BrokerRecord) -> str:
    """One line for ``combee status``: where the recorded broker's data lives, how much there is, whether its
    storage answers."""
    if record.storage.startswith("memory:"):
        return f"Broker storage: memory only ({record.bootstrap}): everything is lost when `combee broker` stops"
    if record.data_dir is None or record.storage_endpoint is None:
        return f"Broker storage: {record.storage} (an S3 service run outside combee; not checked here)"
    from urllib.parse import urlsplit

    from streams.broker.seaweed import directory_bytes, fsync_in_conf, read_filer_conf, s3_bucket_answers

    data = Path(record.data_dir)
    endpoint = urlsplit(record.storage_endpoint)
    healthy = s3_bucket_answers(endpoint.hostname or "127.0.0.1", endpoint.port or 80)
    pid = record.child_pids.get("storage")
    health = ("healthy (its S3 gateway serves the bucket)" if healthy
              else "NOT ANSWERING: produces fail until it is back (combee broker restarts it; see its output)")
    conf = read_filer_conf(endpoint.hostname or "127.0.0.1", record.ports["filer"]) if "filer" in record.ports \
        else None
    sync = ("" if conf is None else "; fsync on (data synced before acknowledged)" if fsync_in_conf(conf)
            else "; fsync OFF (--no-fsync): a power cut may lose the last ~30 s of acknowledged writes")
    return (f"Broker storage: {data} ({directory_bytes(data) / 1e6:.1f} MB on disk), SeaweedFS at "
            f"{record.storage_endpoint} (pid {pid}): {health}{sync}")
