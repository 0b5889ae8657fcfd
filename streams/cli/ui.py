"""``combee ui``: the review web page (docs/review.md), on loopback unless given a token."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.cli.flags import add_common, add_door, settings_from_args
from streams.cli.promote import operator_name
from streams.cli.running import broker_for, stop_on_signals


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    ui = subparsers.add_parser("ui", help="the review web page: inbox, provenance, history, the served version")
    add_common(ui, run=False)
    ui.add_argument("--host", help="address to bind (env COMBEE_UI_HOST, default 127.0.0.1; any other needs "
                    "COMBEE_UI_TOKEN)")
    ui.add_argument("--port", type=int, help="port (env COMBEE_UI_PORT, default 8767; 0: any free one)")
    ui.add_argument("--reviewer", help="whom decisions are attributed to by default (default user@host)")
    add_door(ui, keys=False)
    ui.set_defaults(handler=cmd_ui)


async def cmd_ui(args: argparse.Namespace) -> int:
    from streams.review.server import ReviewServer, check_bind

    settings = settings_from_args(args)
    host = args.host or settings.ui_host
    token = settings.ui_token.get_secret_value() if settings.ui_token else None
    check_bind(host, token)  # before connecting to the broker
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        async with ReviewServer(settings, bootstrap, profile, args.reviewer or operator_name(), host=host,
                                port=settings.ui_port if args.port is None else args.port, token=token) as server:
            print(f"combee ui: {server.url} (topics {settings.topic_prefix}* on {bootstrap})", file=sys.stderr,
                  flush=True)
            await stop.wait()
    return 0
