"""Is a Kafka broker there? A raw Kafka wire probe (sync, no client: used while a child broker starts, and by the
watchdog without client logs) and readiness checks of any broker through aiokafka (which negotiates API versions,
so they work on Kafka 4 too)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator

from combee_core.connection import PLAINTEXT, KafkaConnection


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


async def api_versions(host: str, port: int, timeout_s: float, context: ssl.SSLContext | None = None, *,
                       on_connected: Callable[[object], None] | None = None) -> bool:
    """Ask one address a Kafka ApiVersions v0 request (over TLS with ``context``): True when it answers it. A
    refused, closed or silent connection raises ``OSError``/``TimeoutError``/``IncompleteReadError``; a failed TLS
    handshake raises ``ssl.SSLError`` (an ``OSError``). ``on_connected`` is called once connected (and, with TLS,
    once the handshake is done, as the client sees it)."""
    client_id = b"combee-watch"
    request = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout_s)
        if on_connected is not None:
            on_connected(writer)
        writer.write(struct.pack(">i", len(request)) + request)
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))
        response = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        return bool(struct.unpack(">i", response[:4])[0] == 1)
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), timeout_s)


async def kafka_answers(bootstrap: str, timeout_s: float = 2.0, *, connection: KafkaConnection = PLAINTEXT) -> bool:
    """True when some address of ``bootstrap`` answers a Kafka ApiVersions request (any Kafka version does; over
    TLS when ``connection`` says so, before any SASL step, as brokers allow); never raises and never logs, so it can
    be asked every few seconds while a broker is away."""
    from combee_core.errors import CombeeError

    try:
        context = ssl_context_of(connection)
    except CombeeError:
        return False
    for host, port in bootstrap_addresses(bootstrap):
        try:
            if await api_versions(host, port, timeout_s, context):
                return True
        except (TimeoutError, OSError, asyncio.IncompleteReadError, struct.error, ValueError):
            pass
    return False


def ssl_context_of(connection: KafkaConnection) -> ssl.SSLContext | None:
    """The connection's TLS context, None for a plaintext one."""
    from streams.broker.connection import ssl_context

    return ssl_context(connection) if connection.tls else None


async def wait_for_broker(bootstrap: str, timeout_s: float = 20.0, *,
                          connection: KafkaConnection = PLAINTEXT) -> None:
    """Return once ``bootstrap`` answers a metadata request; ``TimeoutError`` with the last error otherwise."""
    from aiokafka import AIOKafkaClient

    from streams.broker.connection import client_kwargs

    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"Kafka broker {bootstrap} did not answer metadata within {timeout_s}s: {last!r}")
        client = AIOKafkaClient(**client_kwargs(bootstrap, connection),
                                request_timeout_ms=int(max(remaining, 1) * 1000))
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
