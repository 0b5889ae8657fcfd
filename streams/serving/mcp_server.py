"""``combee serve``'s MCP server (the official ``mcp`` SDK's low-level ``Server``), read-only.

Resources: ``playbook://{id}``, the served version of each playbook rendered as prompt text. Subscriptions: every
newly served version notifies ``notifications/resources/updated`` for its URI, on both protocol eras: to the
``subscriptions/listen`` streams of 2026-07-28 clients (through the SDK's subscription bus) and to the sessions of
handshake-era clients that called ``resources/subscribe``; a new playbook notifies ``resources/list_changed``.
Tool: ``context_for_task(playbook_id, task, k, token_budget)``, the top ``k`` entries for a task within a budget.
Transports: stdio, and streamable HTTP (served by uvicorn behind :class:`DoorGate`: the Host/Origin check every HTTP
door shares, then the bearer token or access key as the HTTP API; a key lists, reads, subscribes to and asks for
context of only the playbooks it may read, and no error names another). A playbook with a parent
(``COMBEE_PLAYBOOK_PARENTS``) reads as its composed view, is notified when any scope of it serves a new version, and
its tool context is ranked among the composed entries (``combee_core.serve.scoped_serving``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from combee_core.serve.access_keys import OPEN, Grant, KeyRing
from combee_core.serve.doors import API_HEADERS, DoorPolicy
from combee_core.serve.scoped_serving import composed_context, render_composed
from combee_core.serve.serving import ContextQuery, TaskContext, context_for_task, render_served
from combee_core.settings import CombeeSettings
from streams.serving.served import ServedPlaybooks

log = logging.getLogger(__name__)

SCHEME = "playbook://"
TOOL = "context_for_task"
RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error code MCP gives an unknown resource."""


def playbook_uri(playbook_id: str) -> str:
    return f"{SCHEME}{playbook_id}"


class PlaybookMcp:
    """The MCP handlers over :class:`ServedPlaybooks` and the notifier that tells subscribers of new versions."""

    def __init__(self, served: ServedPlaybooks, keys: KeyRing | None = None) -> None:
        self.served = served
        self.keys = keys or KeyRing()
        """The keys of MCP over HTTP (stdio has no key: its client launched it)."""
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self.legacy: dict[str, set[ServerSession]] = {}
        """Per URI, the handshake-era sessions that subscribed to it."""
        self.server: Server[Any] = Server(
            "combee", title="Combee Streams playbooks",
            instructions="Playbooks learned by Combee Streams: read playbook://{id} for the served version, subscribe "
                         "to hear of each new one, call context_for_task for the entries a task needs.",
            on_list_resources=self._list_resources, on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe, on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._subscriptions_listen, on_list_tools=self._list_tools,
            on_call_tool=self._call_tool)

    async def _list_resources(self, ctx: ServerRequestContext[Any],
                              params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resources = []
        for playbook_id in self._grant(ctx).readable(self.served.playbook_ids()):
            served = self.served.served(playbook_id)
            description = f"the served version (now v{served.version if served else 0}) as prompt text"
            if self.served.composed(playbook_id):
                scopes = ", ".join(f"{scope} v{version.version if version else 0}"
                                   for scope, version in self.served.chain(playbook_id))
                description = f"the composed view ({scopes}) as prompt text"
            resources.append(types.Resource(
                uri=playbook_uri(playbook_id), name=playbook_id, title=f"playbook {playbook_id}",
                description=description, mime_type="text/markdown"))
        return types.ListResourcesResult(resources=resources)

    def _grant(self, ctx: ServerRequestContext[Any]) -> Grant:
        """What the request's key may read (stdio: everything)."""
        request = ctx.request
        if request is None:
            return OPEN
        grant = self.keys.grant(request.headers.get("authorization"))
        if grant is None:  # DoorGate answered 401 before; a session outliving its key lands here
            raise MCPError(RESOURCE_NOT_FOUND, "a bearer token is required")
        return grant

    def _playbook_id(self, uri: str, grant: Grant) -> str:
        playbook_id = uri.removeprefix(SCHEME)
        if uri.startswith(SCHEME) and not grant.may_read(playbook_id):
            raise MCPError(RESOURCE_NOT_FOUND, f"key {grant.name} may not read {uri}")
        if not uri.startswith(SCHEME) or not self.served.known(playbook_id):
            known = ", ".join(playbook_uri(p) for p in grant.readable(self.served.playbook_ids())) or "none yet"
            raise MCPError(RESOURCE_NOT_FOUND, f"no resource {uri} (known: {known})")
        return playbook_id

    async def _read_resource(self, ctx: ServerRequestContext[Any],
                             params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        playbook_id = self._playbook_id(str(params.uri), self._grant(ctx))
        served = self.served.served(playbook_id)
        text = (render_composed(self.served.chain(playbook_id), self.served.token_budget)
                if self.served.composed(playbook_id) else render_served(playbook_id, served))
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=playbook_uri(playbook_id), mime_type="text/markdown", text=text,
            meta={"version": served.version if served else 0, "etag": self.served.etag(playbook_id)})])

    async def _subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
                         ) -> types.EmptyResult:
        self._playbook_id(str(params.uri), self._grant(ctx))
        self.legacy.setdefault(str(params.uri), set()).add(ctx.session)
        return types.EmptyResult()

    async def _subscriptions_listen(self, ctx: ServerRequestContext[Any],
                                    params: types.SubscriptionsListenRequestParams
                                    ) -> types.SubscriptionsListenResult:
        """The SDK's listen stream, once every resource it names is one the key may read."""
        grant = self._grant(ctx)
        for uri in params.notifications.resource_subscriptions or ():
            self._playbook_id(str(uri), grant)
        return await self._listen(ctx, params)

    async def _unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
                           ) -> types.EmptyResult:
        self.legacy.get(str(params.uri), set()).discard(ctx.session)
        return types.EmptyResult()

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(
            name=TOOL, title="Playbook context for a task",
            description="The entries of a playbook's served version most relevant to a task (at most k, within "
                        "token_budget tokens), as prompt text, and their ids.",
            input_schema=ContextQuery.model_json_schema(), annotations=types.ToolAnnotations(read_only_hint=True))])

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != TOOL:
            return _tool_error(f"no tool {params.name!r} (the one tool is {TOOL})")
        try:
            query = ContextQuery.model_validate(params.arguments or {})
        except ValidationError as error:
            first = error.errors()[0]
            return _tool_error(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
        grant = self._grant(ctx)
        if not grant.may_read(query.playbook_id):
            return _tool_error(f"key {grant.name} may not read playbook {query.playbook_id}")
        if not self.served.known(query.playbook_id):
            return _tool_error(f"no playbook {query.playbook_id} (known: "
                               f"{', '.join(grant.readable(self.served.playbook_ids())) or 'none yet'})")
        if self.served.composed(query.playbook_id):
            found: TaskContext = composed_context(self.served.chain(query.playbook_id), query, self.served.token_budget)
        else:
            found = context_for_task(self.served.served(query.playbook_id), query)
        return types.CallToolResult(content=[types.TextContent(text=found.text)],
                                    structured_content=found.model_dump(mode="json"))

    async def notify(self) -> None:
        """Forever: each newly served version to its subscribers, each new playbook as a list change."""
        listed = set(self.served.playbook_ids())
        with self.served.listen() as listener:
            while True:
                changed = await listener.next()
                if changed - listed:
                    listed |= changed
                    await self.bus.publish(ResourcesListChanged())
                    for session in {s for sessions in self.legacy.values() for s in sessions}:
                        await self._send(session, session.send_resource_list_changed(), "list")
                for playbook_id in sorted(changed):
                    uri = playbook_uri(playbook_id)
                    await self.bus.publish(ResourceUpdated(uri=uri))
                    for session in list(self.legacy.get(uri, ())):
                        await self._send(session, session.send_resource_updated(uri), uri)

    async def _send(self, session: ServerSession, sending: Awaitable[None], what: str) -> None:
        """Send to a handshake-era session; one that is gone is dropped from every subscription (logged)."""
        try:
            await sending
        except Exception as error:
            log.info("dropping an MCP session's subscriptions (%s: %s: %s)", what, type(error).__name__, error)
            for sessions in self.legacy.values():
                sessions.discard(session)

    async def run_stdio(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    async def run_http(self, settings: CombeeSettings, port: int,
                       on_ready: Callable[[str], None] | None = None) -> None:
        """Streamable HTTP at ``/mcp`` on ``settings.serve_host:port`` until cancelled."""
        import uvicorn
        from mcp.server.transport_security import TransportSecuritySettings

        # Host and Origin are checked by DoorGate, as at every door (the SDK's own check knows no allowed names)
        app = self.server.streamable_http_app(host=settings.serve_host, stateless_http=False,
                                              transport_security=TransportSecuritySettings(
                                                  enable_dns_rebinding_protection=False))
        tls = bool(settings.http_tls_cert and settings.http_tls_key)
        gate = DoorGate(app, self.keys, DoorPolicy.for_bind(settings.serve_host, settings.allowed_hosts,
                                                            door="combee serve (MCP)"), tls=tls)
        config = uvicorn.Config(gate, host=settings.serve_host, port=port, log_level="warning", lifespan="on",
                                ssl_certfile=settings.http_tls_cert, ssl_keyfile=settings.http_tls_key)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the MCP HTTP server did not start on {settings.serve_host}:{port}")
                await asyncio.sleep(0.05)
            bound = server.servers[0].sockets[0].getsockname()[1]
            host = settings.serve_host
            if on_ready is not None:
                on_ready(f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{bound}/mcp")
            await task
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task


class DoorGate:
    """An ASGI wrapper: a foreign ``Host`` 421 and a foreign ``Origin`` 403 (``combee_core.serve.doors``, as every
    door), then 401 to a request without a valid token or key (none configured: every request passes); the security
    headers on every answer."""

    def __init__(self, app: Callable[..., Awaitable[None]], keys: KeyRing, policy: DoorPolicy, *,
                 tls: bool = False) -> None:
        self.app, self.keys, self.policy, self.tls = app, keys, policy, tls

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refused = self.policy.refusal(headers.get("host"), headers.get("origin"), tls=self.tls)
        if refused is not None:
            await _answer(send, refused[0], refused[1])
            return
        if self.keys.grant(headers.get("authorization")) is None:
            await _answer(send, 401, "a bearer token is required", www_authenticate=True)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY]
            await send(message)

        await self.app(scope, receive, with_headers)


_SECURITY = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in API_HEADERS.items()]


async def _answer(send: Callable[..., Awaitable[None]], status: int, message: str, *,
                  www_authenticate: bool = False) -> None:
    extra = [(b"www-authenticate", b'Bearer realm="combee"')] if www_authenticate else []
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *extra, *_SECURITY]})
    await send({"type": "http.response.body", "body": json.dumps({"error": message}).encode()})


def _tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)
