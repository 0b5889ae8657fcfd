"""Liveness, readiness and metrics over HTTP for worker processes (Kubernetes probes, Prometheus).

A deliberately tiny asyncio HTTP/1.1 server: ``GET /healthz`` answers 200 while the process runs its event loop;
``GET /readyz`` answers 200 once every stage of the worker has started its consumer (joined its consumer group) and
no stage has died, 503 otherwise; ``GET /metrics`` (when the server is given a metrics source, see
``metrics.py``) answers the Prometheus text format. Anything else is 404. Health responses are one short
JSON body; connections close. Given a :class:`~combee_core.serve.doors.DoorPolicy` (the worker's), a foreign
``Host`` is 421 and a foreign ``Origin`` 403, as at every door (the metrics name playbooks; probes and scrapers by
IP address are not affected).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from streams.broker.stopping import stopped_within

if TYPE_CHECKING:
    from combee_core.serve.doors import DoorPolicy
    from streams.broker.watchdog import BrokerWatchdog
    from streams.topology.runtime import Stage

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 421: "Misdirected Request",
            500: "Internal Server Error", 503: "Service Unavailable"}
MAX_REQUEST_HEAD_BYTES = 8192


@dataclass
class WorkerReadiness:
    """Whether a worker's stages are consuming. ``run_worker`` hands it its stages and their tasks."""

    stages: list[Stage] = field(default_factory=list)
    tasks: list[asyncio.Task] = field(default_factory=list)
    broker: BrokerWatchdog | None = None
    """The worker's broker watchdog: while the broker does not answer, the worker is not ready."""

    def watch(self, stages: Sequence[Stage], tasks: Sequence[asyncio.Task]) -> None:
        self.stages = list(stages)
        self.tasks = list(tasks)

    def report(self) -> tuple[bool, dict[str, str]]:
        """(ready, stage name -> "starting" | "consuming" | "waiting for the broker" | "stopped", plus ``"broker":
        "unreachable"`` while the broker does not answer: a stage that joined its group consumes nothing then)."""
        unreachable = self.broker is not None and self.broker.unreachable_since is not None
        states: dict[str, str] = {}
        for stage, task in zip(self.stages, self.tasks):
            if task.done():
                states[stage.name] = "stopped"
            elif stage.started.is_set():
                states[stage.name] = "waiting for the broker" if unreachable else "consuming"
            else:
                states[stage.name] = "starting"
        ready = bool(states) and all(state == "consuming" for state in states.values())
        if unreachable:
            states["broker"] = "unreachable"
            ready = False
        return ready, states


def ready_line(states: dict[str, str]) -> str:
    """The line a worker prints once it is ready: its stages, in order."""
    return f"worker: ready ({', '.join(name for name in states if name != 'broker')})"


READY_POLL_S = 0.05
"""How often :func:`wait_until_ready` asks: the ready line comes at most this late (a question costs microseconds)."""


async def wait_until_ready(readiness: WorkerReadiness, stop: asyncio.Event, poll_s: float = READY_POLL_S) -> bool:
    """True once every stage of the worker is consuming; False if ``stop`` is set first."""
    while not stop.is_set():
        if readiness.report()[0]:
            return True
        await stopped_within(stop, poll_s)
    return False


async def announce_ready(readiness: WorkerReadiness, stop: asyncio.Event, write: Callable[[str], None]) -> None:
    """Write :func:`ready_line` once, when the worker becomes ready (``combee worker`` prints it on stderr)."""
    if await wait_until_ready(readiness, stop):
        write(ready_line(readiness.report()[1]))


class HealthServer:
    """Serves ``/healthz`` and ``/readyz``; ``readiness`` is asked on every ``/readyz`` request. With ``metrics``
    (an async callable returning the exposition text, e.g. ``WorkerMetrics.render``) it serves ``/metrics`` too."""

    def __init__(self, readiness: Callable[[], tuple[bool, dict[str, str]]], host: str = "127.0.0.1",
                 port: int = 8080, *, metrics: Callable[[], Awaitable[bytes]] | None = None,
                 policy: DoorPolicy | None = None) -> None:
        self._readiness = readiness
        self._metrics = metrics
        self._policy = policy
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # the real port when 0 was asked for
        log.info("health endpoints on http://%s:%d/healthz and /readyz%s", self.host, self.port,
                 " and /metrics" if self._metrics is not None else "")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _refusal(self, head: bytes) -> tuple[int, str] | None:
        """The door policy's answer to the request's ``Host`` and ``Origin`` headers (None: answer it)."""
        if self._policy is None:
            return None
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return self._policy.refusal(headers.get("host"), headers.get("origin"))

    def respond(self, method: str, path: str) -> tuple[int, dict[str, object]]:
        """Status and JSON body for a request line (pure; the socket handling is in ``_serve``)."""
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/readyz") and not (path == "/metrics" and self._metrics is not None):
            endpoints = "/healthz, /readyz or /metrics" if self._metrics is not None else "/healthz or /readyz"
            return 404, {"error": f"no such endpoint {path!r}; use {endpoints}"}
        if method not in ("GET", "HEAD"):
            return 405, {"error": f"{method} not allowed; use GET"}
        if path == "/healthz":
            return 200, {"status": "alive"}
        if path == "/metrics":  # served as text by ``_serve``; this is what a JSON answer would say
            return 200, {"status": "metrics are served as text/plain by GET"}
        ready, stages = self._readiness()
        return (200 if ready else 503), {"status": "ready" if ready else "not ready", "stages": stages}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        parts = head[:MAX_REQUEST_HEAD_BYTES].split(b"\r\n", 1)[0].decode("latin-1").split()
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("GET", "/")
        content_type = "application/json"
        refused = self._refusal(head[:MAX_REQUEST_HEAD_BYTES])
        if refused is not None:
            status, payload = refused[0], orjson.dumps({"error": refused[1]})
        elif path.split("?", 1)[0] == "/metrics" and self._metrics is not None and method in ("GET", "HEAD"):
            from prometheus_client import CONTENT_TYPE_LATEST  # the text exposition format

            try:
                status, payload, content_type = 200, await self._metrics(), CONTENT_TYPE_LATEST
            except Exception as error:  # a failing collector must not kill the health server
                log.exception("metrics: scrape failed")
                status, payload = 500, orjson.dumps({"error": f"{type(error).__name__}: {error}"})
        else:
            status, body = self.respond(method, path)
            payload = orjson.dumps(body)
        response = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1") + (b"" if method == "HEAD" else payload)
        try:
            writer.write(response)
            await writer.drain()
        except ConnectionError:
            pass  # the prober went away; nothing to answer
        finally:
            writer.close()
