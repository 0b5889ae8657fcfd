"""``combee serve``'s MCP server (the official ``mcp`` SDK's low-level ``Server``), read-only.

Resources: ``playbook://{id}``, the served version of each playbook rendered as prompt text. Subscriptions: every
newly served version notifies ``notifications/resources/updated`` for its URI, on both protocol eras: to the
``subscriptions/listen`` streams of 2026-07-28 clients (through the SDK's subscription bus) and to the sessions of
handshake-era clients that called ``resources/subscribe``; a new playbook notifies ``resources/list_changed``.
Tool: ``context_for_task(playbook_id, task, k, token_budget)``, the top ``k`` entries for a task within a budget.
Transports: stdio, and streamable HTTP (served by uvicorn, bearer token as the HTTP API). A playbook with a parent
(``COMBEE_PLAYBOOK_PARENTS``) reads as its composed view, is notified when any scope of it serves a new version, and
its tool context is ranked among the composed entries (``combee_core.serve.scoped_serving``).
"""

from __future__ import annotations

import asyncio
import contextlib
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

from combee_core.serve.scoped_serving import composed_context, render_composed
from combee_core.serve.serving import ContextQuery, TaskContext, authorized, context_for_task, render_served
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

    def __init__(self, served: ServedPlaybooks) -> None:
        self.served = served
        self.bus = InMemorySubscriptionBus()
        self.legacy: dict[str, set[ServerSession]] = {}
        """Per URI, the handshake-era sessions that subscribed to it."""
        self.server: Server[Any] = Server(
            "combee", title="Combee Streams playbooks",
            instructions="Playbooks learned by Combee Streams: read playbook://{id} for the served version, subscribe "
                         "to hear of each new one, call context_for_task for the entries a task needs.",
            on_list_resources=self._list_resources, on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe, on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=ListenHandler(self.bus), on_list_tools=self._list_tools,
            on_call_tool=self._call_tool)

    async def _list_resources(self, ctx: ServerRequestContext[Any],
                              params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resources = []
        for playbook_id in self.served.playbook_ids():
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

    def _playbook_id(self, uri: str) -> str:
        playbook_id = uri.removeprefix(SCHEME)
        if not uri.startswith(SCHEME) or not self.served.known(playbook_id):
            known = ", ".join(playbook_uri(p) for p in self.served.playbook_ids()) or "none yet"
            raise MCPError(RESOURCE_NOT_FOUND, f"no resource {uri} (known: {known})")
        return playbook_id

    async def _read_resource(self, ctx: ServerRequestContext[Any],
                             params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        playbook_id = self._playbook_id(str(params.uri))
        served = self.served.served(playbook_id)
        text = (render_composed(self.served.chain(playbook_id), self.served.token_budget)
                if self.served.composed(playbook_id) else render_served(playbook_id, served))
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=playbook_uri(playbook_id), mime_type="text/markdown", text=text,
            meta={"version": served.version if served else 0, "etag": self.served.etag(playbook_id)})])

    async def _subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
                         ) -> types.EmptyResult:
        self.legacy.setdefault(str(params.uri), set()).add(ctx.session)
        return types.EmptyResult()

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
        if not self.served.known(query.playbook_id):
            return _tool_error(f"no playbook {query.playbook_id} (known: "
                               f"{', '.join(self.served.playbook_ids()) or 'none yet'})")
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

        app = self.server.streamable_http_app(host=settings.serve_host, stateless_http=False)
        token = settings.serve_token.get_secret_value() if settings.serve_token else None
        config = uvicorn.Config(BearerGate(app, token), host=settings.serve_host, port=port, log_level="warning",
                                lifespan="on")
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
                on_ready(f"http://{f'[{host}]' if ':' in host else host}:{bound}/mcp")
            await task
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task


class BearerGate:
    """An ASGI wrapper answering 401 to an HTTP request without the bearer token (none: every request passes)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] == "http" and self.token:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not authorized(headers.get("authorization"), self.token):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="combee"')]})
                await send({"type": "http.response.body", "body": b'{"error": "a bearer token is required"}'})
                return
        await self.app(scope, receive, send)


def _tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)
