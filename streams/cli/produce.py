"""``combee produce``: validate and publish traces from a JSONL file or stdin."""

from __future__ import annotations

import argparse
import sys

from combee_core.topology import Topic
from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    produce = subparsers.add_parser("produce", help="validate and publish traces from a JSONL file or stdin")
    add_common(produce, run=False)
    produce.add_argument("file", help="JSONL file of traces, or - for stdin")
    produce.add_argument("--skip-invalid", action="store_true", help="send the valid lines even if some are not")
    produce.set_defaults(handler=cmd_produce)


async def cmd_produce(args: argparse.Namespace) -> int:
    from streams.topology.produce import load_traces, produce_traces

    settings = settings_from_args(args)
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="strict")
    with source:
        async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):  # no broker: read nothing
            loaded = load_traces(source)
            for error in loaded.errors:
                print(f"line {error.line}: {error.reason}", file=sys.stderr)
            if loaded.errors and not args.skip_invalid:
                print(f"{len(loaded.errors)} invalid line(s); nothing sent (use --skip-invalid to send the valid "
                      f"ones)", file=sys.stderr)
                return 2
            sent = await produce_traces(settings, bootstrap, profile, loaded.traces)
    gone = " (a throwaway broker: they are gone with it)" if args.embedded and not settings.kafka_bootstrap else ""
    print(f"sent {sent} trace(s) to {settings.topic(Topic.TRACES)}{gone}", file=sys.stderr)
    return 0
