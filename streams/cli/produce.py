"""``combee produce``: validate and publish traces from a JSONL file or stdin.

The same behaviour as the example producers (``examples/``): every bad line is reported with its number and not
sent, the valid ones are sent (none with ``--strict``); exit 0 when all were sent, 1 when some were rejected, 2 when
nothing could be sent (no broker, no file). Sending the corrected file again is safe: the batcher drops a
``trace_id`` it has already batched with the same content."""

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
    produce.add_argument("--strict", action="store_true", help="send nothing when any line is invalid (exit 1); "
                         "default: send the valid lines, report the others, exit 1")
    produce.add_argument("--skip-invalid", action="store_true", help=argparse.SUPPRESS)  # the default now; kept
    # for scripts written when sending nothing was
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
            if loaded.errors and args.strict:
                print(f"{len(loaded.errors)} invalid line(s); nothing sent (--strict)", file=sys.stderr)
                return 1
            sent = await produce_traces(settings, bootstrap, profile, loaded.traces)
    gone = " (a throwaway broker: they are gone with it)" if args.embedded and not settings.kafka_bootstrap else ""
    rejected = f"; rejected {len(loaded.errors)} invalid line(s), listed above" if loaded.errors else ""
    print(f"sent {sent} trace(s) to {settings.topic(Topic.TRACES)}{gone}{rejected}", file=sys.stderr)
    return 1 if loaded.errors else 0
