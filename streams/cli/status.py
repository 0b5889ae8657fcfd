"""``combee status``: topics, lag per stage, version and batch size per playbook, the controller's last decision;
and, for the broker ``combee broker`` runs on this machine, where its data lives and whether its storage answers."""

from __future__ import annotations

import argparse
import asyncio

from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser("status", help="topics, lag per stage, version and batch size per playbook")
    add_common(status, run=False, run_id=True)  # the run id names the groups whose lag it shows
    status.set_defaults(handler=cmd_status)


async def cmd_status(args: argparse.Namespace) -> int:
    from streams.broker.durable import storage_report
    from streams.broker.state import read_record
    from streams.topology.observe import collect_status, format_status
    from streams.topology.stream_health import collect_stream_health, format_stream_health

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        record = None if settings.kafka_bootstrap or args.embedded else read_record()
        if record is not None:  # first: when the storage is down, what follows may wait for it
            print(await asyncio.to_thread(storage_report, record), flush=True)
        status = await collect_status(settings, bootstrap, profile)
        health = await collect_stream_health(settings, bootstrap, profile, status.waiting)
    print(format_status(status))
    print(format_stream_health(health))
    return 0
