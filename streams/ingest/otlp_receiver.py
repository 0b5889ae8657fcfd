"""The OTLP/HTTP receiver (``combee otlp-receiver``): ``POST /v1/traces``, protobuf or JSON, as the OTLP
specification says, written to the OTLP topic the ``ingest-otlp`` stage reads (one record per trace id, keyed by it,
in ``otlp_proto``: what the Collector's Kafka exporter writes with ``partition_traces_by_id``).

A 200 answers only once the broker has every record of the request. Bodies over ``otlp_max_body_bytes`` (after
gzip) are 413; an encoding other than protobuf or JSON 415; an unreadable body 400; spans with invalid ids are
rejected and counted in ``partial_success``. When the pipeline cannot keep up it answers 429 (``otlp_max_inflight``
requests already in hand, or the ``ingest-otlp`` group more than ``otlp_max_lag`` records behind on the topic, as
measured every :data:`LAG_POLL_S`), and 503 while that group has no member (``otlp_require_ingest``: nothing would
turn the spans into traces; the reason names the group) or when the broker does not take the records in time, both
with ``Retry-After``: the OTLP exporters retry those. Loopback by default (``otlp_receiver_host``). ``combee worker
--otlp`` runs it in the worker's process, with the worker's settings (so the same group).

Who and where: with access keys that may write (``COMBEE_ACCESS_KEYS``, ``write=``) every request needs
``Authorization: Bearer <key>`` (401), and every span must land in a playbook the key may write (403, nothing written;
``combee_core.otlp.ingest_scope``); beyond loopback it refuses to start without such keys. A foreign ``Host`` is 421
and a foreign ``Origin`` 403 (``combee_core.serve.doors``); TLS with ``COMBEE_HTTP_TLS_CERT``/``_KEY``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from combee_core.errors import CombeeError
from combee_core.ingest.redaction import RedactionConfig, Redactor
from combee_core.otlp.export import WireEncoding, export_response, split_by_trace, status_body
from combee_core.otlp.ingest_scope import ScopeRefused, enforce_write_scope
from combee_core.otlp.request_redaction import redact_message
from combee_core.otlp.wire import OtlpDecodeError, decode_request, encode_request
from combee_core.serve.access_keys import Grant, KeyRing
from combee_core.serve.doors import API_HEADERS
from combee_core.serve.serving import is_loopback
from combee_core.settings import CombeeSettings
from streams.broker.stopping import stopped_within
from streams.topology.web_app import door_policy, guard, http_url, start_app, tls_context

log = logging.getLogger(__name__)

Sink = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
"""Writes ``(key, record)`` pairs durably (to the OTLP topic); raises when it cannot."""

RETRY_BUSY_S = 1
RETRY_UNAVAILABLE_S = 5
SINK_TIMEOUT_S = 10.0
LAG_POLL_S = 1.0
_TYPES: dict[str, WireEncoding] = {"application/x-protobuf": "otlp_proto", "application/protobuf": "otlp_proto",
                                   "application/json": "otlp_json"}


class BodyTooLarge(CombeeError, ValueError):
    """The body is over the receiver's limit."""


class ReceiverBindError(CombeeError, ValueError):
    """The receiver cannot listen where asked: beyond this machine without keys that may write, or a port taken."""


def receiver_keys(settings: CombeeSettings) -> KeyRing:
    """The keys the receiver accepts: the access keys that may write (none: every sender, loopback only)."""
    ring = KeyRing.load(settings.access_keys, settings.access_keys_file)
    return KeyRing({digest: grant for digest, grant in ring.keys.items() if grant.write})


def check_receiver_bind(host: str, keys: KeyRing) -> None:
    """:class:`ReceiverBindError` for an address beyond loopback without a key that may write."""
    if not is_loopback(host) and not keys.required:
        raise ReceiverBindError(f"combee otlp-receiver will not listen on {host} without keys: set COMBEE_ACCESS_KEYS "
                                "(or --access-keys-file) with a write=<playbooks> key per sender, or bind 127.0.0.1")


@dataclass
class OtlpReceiver:
    """An aiohttp server for ``POST /v1/traces``; ``async with OtlpReceiver(settings, sink) as receiver``."""

    settings: CombeeSettings
    sink: Sink
    host: str | None = None
    port: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    backlog: int | None = None
    """Records the ingest-otlp group has not consumed yet (None: not measured), kept by :func:`follow_backlog`."""
    consumers: int | None = None
    """Members of the ingest-otlp group (None: not measured), kept by :func:`follow_backlog`."""
    redaction: RedactionConfig | None = None
    """Set from the settings when ``redact`` and ``redact_before_produce`` are on: requests are redacted first."""
    keys: KeyRing = field(default_factory=KeyRing)
    """The keys that may write (set from the settings)."""
    _inflight: int = 0
    _runner: web.AppRunner | None = None
    _tls: bool = False

    def __post_init__(self) -> None:
        if self.redaction is None and self.settings.redact and self.settings.redact_before_produce:
            self.redaction = RedactionConfig.from_settings(self.settings)
        self.keys = receiver_keys(self.settings)
        check_receiver_bind(self.host or self.settings.otlp_receiver_host, self.keys)

    async def __aenter__(self) -> OtlpReceiver:
        app = web.Application(client_max_size=self.settings.otlp_max_body_bytes + 1)
        app.router.add_post("/v1/traces", self.handle)
        context = tls_context(self.settings)
        self._tls = context is not None
        host = self.host or self.settings.otlp_receiver_host
        guard(app, door_policy(self.settings, host, "combee otlp-receiver"), API_HEADERS, tls=self._tls)
        port = self.settings.otlp_receiver_port if self.port is None else self.port
        try:
            self._runner, self.port = await start_app(app, host, port, ssl_context=context)
        except OSError as error:  # the port taken, an address not of this machine
            raise ReceiverBindError(f"the OTLP/HTTP receiver cannot listen on {host}:{port}: "
                                    f"{error.strerror or error} (--otlp-port / --port, COMBEE_OTLP_RECEIVER_PORT)") \
                from error
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        assert self.port is not None
        return http_url(self.host or self.settings.otlp_receiver_host, self.port, "/v1/traces", tls=self._tls)

    def _count(self, name: str, amount: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + amount

    async def handle(self, request: web.Request) -> web.Response:
        encoding = _TYPES.get(request.content_type)
        if encoding is None:
            return self._error("otlp_json", 415, 3, f"unsupported content type {request.content_type!r}: "
                               "application/x-protobuf or application/json")
        grant = self.keys.grant(request.headers.get("Authorization"))
        if grant is None:
            return self._error(encoding, 401, 16, "a key is required: Authorization: Bearer <access key with "
                               "write=> (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>)")
        if self.settings.otlp_require_ingest and self.consumers == 0:
            return self._error(encoding, 503, 14, no_ingest_reason(self.settings), retry_after=RETRY_UNAVAILABLE_S)
        if self._inflight >= self.settings.otlp_max_inflight:
            return self._error(encoding, 429, 8, "receiver busy; retry later", retry_after=RETRY_BUSY_S)
        limit = self.settings.otlp_max_lag
        if limit and self.backlog is not None and self.backlog > limit:
            return self._error(encoding, 429, 8, f"pipeline behind by {self.backlog} records; retry later",
                               retry_after=RETRY_BUSY_S)
        self._inflight += 1
        try:
            return await self._export(request, encoding, grant)
        finally:
            self._inflight -= 1

    async def _export(self, request: web.Request, encoding: WireEncoding, grant: Grant) -> web.Response:
        limit = self.settings.otlp_max_body_bytes
        try:
            body = await _read_body(request, limit)
            parsed = decode_request(body, encoding)
        except BodyTooLarge as error:
            return self._error(encoding, 413, 3, str(error))
        except OtlpDecodeError as error:
            return self._error(encoding, 400, 3, f"unreadable request: {error}")
        try:
            self._count("otlp_receiver_stamped_spans", enforce_write_scope(parsed, grant,
                                                                          self.settings.otlp_default_playbook))
        except ScopeRefused as error:
            return self._error(encoding, 403, 7, str(error))
        split = split_by_trace(parsed)
        if self.redaction is not None:  # redact_before_produce: raw content never reaches the OTLP topic
            redactor = Redactor(self.redaction)
            for _, part in split.parts:
                redact_message(part, redactor)
            for name, amount in redactor.counts.items():
                self._count(f"redactions.otlp-receiver.{name}", amount)
        records = [(trace_id, encode_request(part, "otlp_proto")) for trace_id, part in split.parts]
        try:
            await asyncio.wait_for(self.sink(records), SINK_TIMEOUT_S)
        except Exception as error:  # the broker's errors (aiokafka's) and the timeout: the client retries
            log.warning("otlp receiver: records not written (%s: %s); answering 503", type(error).__name__, error)
            return self._error(encoding, 503, 14, f"pipeline unavailable: {type(error).__name__}",
                               retry_after=RETRY_UNAVAILABLE_S)
        self._count("otlp_receiver_requests")
        self._count("otlp_receiver_records", len(records))
        self._count("otlp_receiver_rejected_spans", split.rejected)
        content_type = "application/json" if encoding == "otlp_json" else "application/x-protobuf"
        return web.Response(status=200, body=export_response(encoding, split.rejected, split.reason),
                            content_type=content_type)

    def _error(self, encoding: WireEncoding, status: int, code: int, message: str,
               retry_after: int | None = None) -> web.Response:
        self._count(f"otlp_receiver_status_{status}")
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        content_type = "application/json" if encoding == "otlp_json" else "application/x-protobuf"
        return web.Response(status=status, body=status_body(encoding, code, message), headers=headers,
                            content_type=content_type)


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body (aiohttp inflates ``Content-Encoding: gzip`` as it streams); :class:`BodyTooLarge` once more than
    ``limit`` bytes arrive, so a compressed bomb is cut off at the limit too."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(f"body of {request.content_length} bytes is over the limit of {limit}")
    raw = bytearray()
    async for chunk in request.content.iter_chunked(65536):
        raw += chunk
        if len(raw) > limit:
            raise BodyTooLarge(f"body over the limit of {limit} bytes (after decompression)")
    return bytes(raw)


def no_ingest_reason(settings: CombeeSettings) -> str:
    """Why the receiver answers 503 while nothing ingests (one line)."""
    from combee_core.topology import INGEST_OTLP

    return (f"nothing ingests topic {settings.otlp_topic}: consumer group {settings.group(INGEST_OTLP.name)} has no "
            "member; run `combee worker --otlp` (or a worker with COMBEE_OTLP_INGEST=1 and this receiver's "
            "--prefix and --run-id)")


def kafka_sink(producer, topic: str) -> Sink:
    """Write records to ``topic`` with ``producer`` (an aiokafka producer) and wait for the broker's acks."""

    async def write(records: list[tuple[str, bytes]]) -> None:
        futures = [await producer.send(topic, value, key=key.encode()) for key, value in records]
        await asyncio.gather(*futures)

    return write


async def serve_receiver(settings: CombeeSettings, bootstrap: str, profile, stop: asyncio.Event,
                         on_ready: Callable[[OtlpReceiver], None] | None = None) -> dict[str, int]:
    """Create the OTLP topic (``otlp_topic``, ``partitions`` partitions; an existing one is left alone), then serve
    until ``stop`` is set; returns the receiver's counters."""
    from streams.broker.admin import create_topics
    from streams.topology.kafka_clients import start_producer

    await create_topics(bootstrap, {settings.otlp_topic: settings.partitions}, connection=profile.connection)
    producer = await start_producer(bootstrap, profile)
    try:
        async with OtlpReceiver(settings, kafka_sink(producer, settings.otlp_topic)) as receiver:
            measured = asyncio.Event()
            follower = asyncio.create_task(follow_backlog(receiver, bootstrap, profile, stop, measured))
            with contextlib.suppress(TimeoutError):  # answer from the first measurement, not from none
                await asyncio.wait_for(measured.wait(), SINK_TIMEOUT_S)
            if on_ready is not None:
                on_ready(receiver)
            await stop.wait()
            await follower
            return dict(receiver.counters)
    finally:
        await producer.stop()


async def follow_backlog(receiver: OtlpReceiver, bootstrap: str, profile, stop: asyncio.Event,
                         measured: asyncio.Event | None = None) -> None:
    """Every :data:`LAG_POLL_S` until ``stop``: how far the ingest-otlp group is behind on the OTLP topic, and how many
    members it has (a broker that does not answer leaves the last figures and is logged; the sink's own errors answer
    503 meanwhile). ``measured`` is set after the first round."""
    from aiokafka.admin import AIOKafkaAdminClient

    from combee_core.topology import INGEST_OTLP
    from streams.broker.admin import close_client
    from streams.broker.connection import client_kwargs
    from streams.topology.observe import committed_lag, group_members
    from streams.topology.topic_reader import TopicReader

    settings = receiver.settings
    if not settings.otlp_max_lag and not settings.otlp_require_ingest:
        if measured is not None:
            measured.set()
        return
    group = settings.group(INGEST_OTLP.name)
    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, profile.connection))
    reader = TopicReader(bootstrap, profile, what="the lag consumer")
    await asyncio.gather(admin.start(), reader.start())
    try:
        while not stop.is_set():
            try:
                if settings.otlp_require_ingest:
                    receiver.consumers = await group_members(admin, group)
                if settings.otlp_max_lag:
                    tps = await reader.partitions(settings.otlp_topic, refresh=True)
                    ends = await reader.end_offsets(tps)
                    receiver.backlog = await committed_lag(admin, group, ends)
            except Exception as error:  # aiokafka's errors: keep the last figure, try again
                log.warning("otlp receiver: lag not measured (%s: %s)", type(error).__name__, error)
            if measured is not None:
                measured.set()
            await stopped_within(stop, LAG_POLL_S)
    finally:
        await reader.stop()
        await close_client(admin.close(), "the admin client")
