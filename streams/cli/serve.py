"""``combee serve``: the served playbook versions over HTTP and MCP (docs/serving.md), read-only."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from streams.cli.flags import add_common, add_door, add_loss_grace, settings_from_args
from streams.cli.running import broker_for, stop_on_signals

if TYPE_CHECKING:
    from combee_core.settings import CombeeSettings
    from streams.broker.profile import BrokerProfile
    from streams.serving.served import ServedPlaybooks


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("serve", help="serve the served playbook versions over HTTP (GET, ETag, long-poll, "
                                  "events) and MCP (resources, subscriptions, a context tool)")
    add_common(serve, run=False)
    serve.add_argument("--host", help="address to bind (env COMBEE_SERVE_HOST, default 127.0.0.1: loopback only; "
                       "beyond loopback COMBEE_SERVE_TOKEN is required)")
    serve.add_argument("--port", type=int, help="HTTP port (env COMBEE_SERVE_PORT, default 8765; 0: any free one); "
                       "with --mcp stdio there is no HTTP API unless --port is given")
    serve.add_argument("--mcp", choices=("none", "stdio", "http"), default="none",
                       help="MCP server: on stdin/stdout (for a client that launches it), or streamable HTTP at "
                       "/mcp on --mcp-port (default none)")
    serve.add_argument("--mcp-port", type=int, help="MCP streamable-HTTP port (env COMBEE_SERVE_MCP_PORT, default "
                       "8766; 0: any free one)")
    serve.add_argument("--promotion", action="store_const", const=True, help="the run promotes versions (env "
                       "COMBEE_PROMOTION): serve the promoted version (the default when the promoter has decided)")
    add_loss_grace(serve)
    add_door(serve)
    serve.set_defaults(handler=cmd_serve)


async def cmd_serve(args: argparse.Namespace) -> int:
    from combee_core.serve.serving import check_exposure
    from streams.serving.http import serve_keys

    settings = settings_from_args(args)
    settings = settings.model_copy(update={k: v for k, v in {"serve_host": args.host, "serve_port": args.port,
                                                            "serve_mcp_port": args.mcp_port}.items()
                                           if v is not None})
    check_exposure([settings.serve_host], settings.serve_token.get_secret_value() if settings.serve_token else None,
                   keys=bool(serve_keys(settings).keys))
    http_on = args.mcp != "stdio" or args.port is not None
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        return await _serve(settings, bootstrap, profile, stop, mcp=args.mcp, http_on=http_on)


async def _serve(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, stop: asyncio.Event, *, mcp: str,
                 http_on: bool) -> int:
    from combee_core.serve.serving import ServeConfigError
    from combee_core.topology import Topic
    from streams.broker.watchdog import BrokerWatchdog, watching
    from streams.cli.promote import read_ledger
    from streams.serving.http import ServeHttp, serve_keys
    from streams.serving.served import ServedPlaybooks

    def say(line: str) -> None:
        print(f"serve: {line}", file=sys.stderr, flush=True)

    if not settings.promotion:
        ledger = await read_ledger(settings, bootstrap, profile)
        if any(ledger.last_decided(playbook_id) > 0 for playbook_id in ledger.latest):
            settings = settings.model_copy(update={"promotion": True})
            say(f"the promoter has decided on {settings.topic(Topic.PROMOTED)}: serving promoted versions")
    watchdog = BrokerWatchdog(bootstrap, settings.broker_loss_grace_s, stop, topics=[],
                              connection=profile.connection)
    async with watching(watchdog), ServedPlaybooks(settings, bootstrap, profile) as served, \
            contextlib.AsyncExitStack() as running:
        say(f"following {settings.topic(Topic.PLAYBOOK)} on {bootstrap}: "
            f"{len(served.table.playbook_ids())} playbook(s), serving "
            f"{'promoted versions' if settings.promotion else 'the newest version (unless rolled back)'}")
        if http_on:
            http = await running.enter_async_context(ServeHttp(settings, served))
            say(f"HTTP API on {http.url}/playbooks")
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait(), name="stop")]
        if mcp != "none":
            try:
                from streams.serving.mcp_server import PlaybookMcp
            except ModuleNotFoundError as missing:
                raise ServeConfigError(f"the MCP server needs the [serve] extra ({missing.name} is not installed): "
                                       "pip install 'combee-streams[serve]'") from missing

            server = PlaybookMcp(served, serve_keys(settings))
            tasks.append(asyncio.create_task(server.notify(), name="mcp-notify"))
            if mcp == "stdio":
                tasks.append(asyncio.create_task(server.run_stdio(), name="mcp-stdio"))
                say("MCP on stdin/stdout")
            else:
                port = settings.serve_mcp_port
                tasks.append(asyncio.create_task(server.run_http(settings, port, on_ready=lambda url: say(
                    f"MCP (streamable HTTP) on {url}")), name="mcp-http"))
        tasks.append(asyncio.create_task(_following(served), name="follow"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            failure = None if task.get_name() == "stop" or task.cancelled() else task.exception()
            if failure is not None:
                raise failure
    if watchdog.cause is not None:
        raise watchdog.cause
    return 0


async def _following(served: ServedPlaybooks) -> None:
    """Returns (raising its error) when the follower stops."""
    while True:
        served.check_following()
        await asyncio.sleep(1.0)
