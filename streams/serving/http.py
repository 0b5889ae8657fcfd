"""``combee serve``'s HTTP API (aiohttp, as the OTLP receiver): the served version of each playbook, read-only.

``GET /playbooks`` lists them; ``GET /playbooks/{id}`` answers the served version (the ``PlaybookVersion`` JSON)
with an ``ETag``: ``If-None-Match`` with the same tag is 304, and ``?wait=S`` holds the request until another version
is served or ``S`` seconds pass (a long-poll); ``GET /playbooks/{id}/versions/{v}`` any version kept;
``GET /playbooks/{id}/context?task=...&k=...&budget=...`` the top ``k`` entries for a task within a token budget;
``GET /playbooks/{id}/events`` a server-sent event stream, one ``version`` event per newly served version. With a
token (``COMBEE_SERVE_TOKEN``) or access keys (``COMBEE_ACCESS_KEYS``, ``combee_core.serve.access_keys``) every
request needs ``Authorization: Bearer <token or key>`` (401 otherwise); a key reads only the playbooks it names (403
for another, known or not), ``GET /playbooks`` lists only those, and no error names another. A foreign ``Host`` is
421 and a foreign ``Origin`` 403 (``combee_core.serve.doors``), with or without a key.

A playbook with a parent (``COMBEE_PLAYBOOK_PARENTS``) is answered its composed view instead of its version
(``combee_core.serve.scoped_serving.ComposedPlaybook``, in ``GET /playbooks/{id}`` and its events), under a tag over
every scope's served version; its context is ranked among the composed entries. ``/versions/{v}`` and
``GET /playbooks`` stay the playbook's own versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from aiohttp import web
from pydantic import ValidationError

from combee_core.serve.access_keys import OPEN, Grant, KeyRing
from combee_core.serve.doors import API_HEADERS
from combee_core.serve.scoped_serving import composed_context, composed_playbook
from combee_core.serve.serving import (
    NOTHING_SERVED_ETAG,
    ContextQuery,
    TaskContext,
    VersionNotKept,
    context_for_task,
    etag,
    etag_matches,
    keep_waiting,
    parse_wait,
)
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.serving.served import ServedPlaybooks
from streams.topology.web_app import door_policy, guard, http_url, start_app, tls_context

log = logging.getLogger(__name__)

SSE_HEARTBEAT_S = 15.0
"""An event stream sends a comment line this often, so proxies and clients see it alive."""

SHUTDOWN_S = 2.0
"""On stop, open long-polls and event streams are given this long, then closed (they reconnect elsewhere)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
GRANT = web.RequestKey("grant", Grant)
"""What the request's token or key may read (set by the auth middleware)."""


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@dataclass
class ServeHttp:
    """``async with ServeHttp(settings, served) as http``: the API on ``settings.serve_host:serve_port``."""

    settings: CombeeSettings
    served: ServedPlaybooks
    host: str | None = None
    port: int | None = None
    keys: KeyRing = field(default_factory=KeyRing)
    """The keys accepted (set from the settings on enter)."""
    _runner: web.AppRunner | None = None
    _tls: bool = False

    @property
    def token(self) -> str | None:
        return self.settings.serve_token.get_secret_value() if self.settings.serve_token else None

    async def __aenter__(self) -> ServeHttp:
        self.keys = serve_keys(self.settings)
        app = web.Application(middlewares=[self._auth])
        context = tls_context(self.settings)
        self._tls = context is not None
        guard(app, door_policy(self.settings, self.host or self.settings.serve_host, "combee serve"), API_HEADERS,
              tls=self._tls)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/playbooks", self.playbooks)
        app.router.add_get("/playbooks/{playbook_id}", self.playbook)
        app.router.add_get("/playbooks/{playbook_id}/versions/{version}", self.version)
        app.router.add_get("/playbooks/{playbook_id}/context", self.context)
        app.router.add_get("/playbooks/{playbook_id}/events", self.events)
        self._runner, self.port = await start_app(
            app, self.host or self.settings.serve_host, self.settings.serve_port if self.port is None else self.port,
            handler_cancellation=True, shutdown_timeout=SHUTDOWN_S, ssl_context=context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        assert self.port is not None
        return http_url(self.host or self.settings.serve_host, self.port, tls=self._tls)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        grant = self.keys.grant(request.headers.get("Authorization"))
        if grant is None:
            return _error(401, "a bearer token is required (Authorization: Bearer <an access key or "
                          "COMBEE_SERVE_TOKEN>)", **{"WWW-Authenticate": 'Bearer realm="combee"'})
        playbook_id = request.match_info.get("playbook_id")
        if playbook_id is not None and not grant.may_read(playbook_id):
            return _error(403, f"key {grant.name} may not read playbook {playbook_id}")
        request[GRANT] = grant
        return await handler(request)

    async def healthz(self, request: web.Request) -> web.Response:
        """200 while the follower runs; ``pending`` lists the records read past and still missing (the versions
        behind each are not served until it is read or given up)."""
        self.served.check_following()
        pending = [{"log": where, "offset": offset} for where, offset in self.served.pending()]
        return web.json_response({"status": "ok", "pending": pending})

    async def playbooks(self, request: web.Request) -> web.Response:
        listed = [self.served.summary(pid).model_dump(mode="json")
                  for pid in _grant(request).readable(self.served.playbook_ids())]
        return web.json_response(listed, dumps=lambda obj: orjson.dumps(obj).decode())

    async def playbook(self, request: web.Request) -> web.Response:
        playbook_id = request.match_info["playbook_id"]
        if_none_match = request.headers.get("If-None-Match")
        try:
            wait_s = parse_wait(request.query.get("wait"), self.settings.serve_max_wait_s)
        except ValueError as error:
            return _error(400, str(error))
        if wait_s > 0:
            await self.served.wait_until(
                lambda: not keep_waiting(if_none_match, self.served.etag(playbook_id)), wait_s)
        tag = self.served.etag(playbook_id)
        headers = {"ETag": tag, "Cache-Control": "no-cache"}
        if etag_matches(if_none_match, tag):
            return web.Response(status=304, headers=headers)
        body = self._body(playbook_id)
        if body is None:
            return _error(404, self._missing(playbook_id, _grant(request)), **headers)
        return web.Response(body=body, content_type="application/json", headers=headers)

    def _body(self, playbook_id: str) -> bytes | None:
        """What the playbook's agents are served as JSON: its served version, or with a parent the composed view
        (None: nothing served yet)."""
        if self.served.composed(playbook_id):
            if self.served.etag(playbook_id) == NOTHING_SERVED_ETAG:
                return None
            view = composed_playbook(self.served.chain(playbook_id), self.served.token_budget)
            return orjson.dumps(view.model_dump(mode="json"))
        served = self.served.served(playbook_id)
        return served.to_json_bytes() if served is not None else None

    async def version(self, request: web.Request) -> web.Response:
        playbook_id = request.match_info["playbook_id"]
        try:
            number = int(request.match_info["version"])
        except ValueError:
            return _error(400, f"a version is a number, got {request.match_info['version']!r}")
        try:
            found = self.served.version(playbook_id, number)
        except VersionNotKept as error:
            return _error(410, str(error))
        if found is None:
            return _error(404, f"{playbook_id} has no version {number} (newest seen: "
                               f"v{self.served.table.newest.get(playbook_id, 0)})")
        cache = "no-cache" if self.served.under_review(playbook_id) else "max-age=31536000, immutable"  # a decision
        # changes what a version serves under review
        return web.Response(body=found.to_json_bytes(), content_type="application/json",
                            headers={"ETag": etag(found), "Cache-Control": cache})

    async def context(self, request: web.Request) -> web.Response:
        playbook_id = request.match_info["playbook_id"]
        query = request.query
        try:
            numbers = {name: _integer(key, query[key]) for key, name in (("k", "k"), ("budget", "token_budget"))
                       if query.get(key)}
            asked = ContextQuery(playbook_id=playbook_id, task=query.get("task", ""), **numbers)
        except (ValueError, ValidationError) as error:
            return _error(400, _one_line(error))
        if not self.served.known(playbook_id):
            return _error(404, self._missing(playbook_id, _grant(request)))
        if self.served.composed(playbook_id):
            found: TaskContext = composed_context(self.served.chain(playbook_id), asked, self.served.token_budget)
        else:
            found = context_for_task(self.served.served(playbook_id), asked)
        return web.Response(body=orjson.dumps(found.model_dump(mode="json")), content_type="application/json",
                            headers={"ETag": found.etag, "Cache-Control": "no-cache"})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``event: version`` with the served version's JSON (``id:`` its ETag) now and on every
        newly served version (with a parent: the composed view, on a new version of any scope); a client reconnecting
        with ``Last-Event-ID`` gets the current one only if it differs."""
        playbook_id = request.match_info["playbook_id"]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        last = request.headers.get("Last-Event-ID")
        with self.served.listen() as listener, contextlib.suppress(ConnectionResetError):
            while True:
                tag, body = self.served.etag(playbook_id), self._body(playbook_id)
                if body is not None and tag != last:
                    last = tag
                    await response.write(f"event: version\nid: {last}\ndata: ".encode() + body + b"\n\n")
                changed: set[str] = set()
                while playbook_id not in changed:
                    changed = await listener.next(SSE_HEARTBEAT_S)
                    if not changed:
                        await response.write(b": alive\n\n")
                    self.served.check_following()
        return response  # the client went away

    def _missing(self, playbook_id: str, grant: Grant) -> str:
        if self.served.known(playbook_id):
            return f"{playbook_id}: no version served yet"
        known = ", ".join(grant.readable(self.served.playbook_ids())) or "none yet"
        return f"no playbook {playbook_id} on {self.settings.topic(Topic.PLAYBOOK)} (known: {known})"


def serve_keys(settings: CombeeSettings) -> KeyRing:
    """The keys ``combee serve`` (HTTP and MCP) accepts: the access keys, and the global token as a read-all key."""
    token = settings.serve_token.get_secret_value() if settings.serve_token else None
    return KeyRing.load(settings.access_keys, settings.access_keys_file, token=token)


def _grant(request: web.Request) -> Grant:
    return request.get(GRANT, OPEN)


def _integer(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None


def _one_line(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        name = {"token_budget": "budget"}.get(where, where)
        return f"{name}: {first['msg']}"
    return str(error).splitlines()[0]


async def serve_http(settings: CombeeSettings, served: ServedPlaybooks, stop: asyncio.Event,
                     on_ready: Callable[[ServeHttp], None] | None = None) -> None:
    async with ServeHttp(settings, served) as http:
        if on_ready is not None:
            on_ready(http)
        await stop.wait()
