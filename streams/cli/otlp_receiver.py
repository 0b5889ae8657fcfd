"""``combee otlp-receiver``: the OTLP/HTTP door (``POST /v1/traces``) onto the OTLP topic ``ingest-otlp`` reads."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from combee_core.topology import INGEST_OTLP
from streams.cli.flags import add_common, add_door, settings_from_args
from streams.cli.running import broker_for, stop_on_signals


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    receiver = subparsers.add_parser(
        "otlp-receiver", help="receive OpenTelemetry traces over OTLP/HTTP and write them to the OTLP topic "
        "(run a worker with --otlp kafka to turn them into traces; or only `combee worker --otlp`, receiver included)")
    add_common(receiver, run=False)
    receiver.add_argument("--host", help="address to bind (env COMBEE_OTLP_RECEIVER_HOST, default 127.0.0.1: "
                          "loopback only)")
    receiver.add_argument("--port", type=int, help="port (env COMBEE_OTLP_RECEIVER_PORT, default 4318)")
    receiver.add_argument("--otlp-topic", help="OTLP topic to write (env COMBEE_OTLP_TOPIC, default otlp_spans)")
    receiver.add_argument("--require-ingest", dest="otlp_require_ingest", action=argparse.BooleanOptionalAction,
                          help="answer 503 while the run's ingest-otlp group has no member (env "
                          "COMBEE_OTLP_REQUIRE_INGEST, default on; match the worker's --prefix and --run-id, or run "
                          "the receiver inside it: combee worker --otlp)")
    add_door(receiver)
    receiver.set_defaults(handler=cmd_otlp_receiver)


async def cmd_otlp_receiver(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    settings = settings.model_copy(update={k: v for k, v in {"otlp_receiver_host": args.host,
                                                            "otlp_receiver_port": args.port,
                                                            "otlp_topic": args.otlp_topic,
                                                            "otlp_require_ingest": args.otlp_require_ingest}.items()
                                           if v is not None})
    from streams.ingest.otlp_receiver import check_receiver_bind, receiver_keys

    check_receiver_bind(settings.otlp_receiver_host, receiver_keys(settings))  # before connecting to the broker
    stop = asyncio.Event()
    stop_on_signals(stop)
    from streams.ingest.otlp_receiver import serve_receiver

    async with contextlib.AsyncExitStack() as exits:
        bootstrap, profile = await exits.enter_async_context(broker_for(settings, embedded=args.embedded))
        counters = await serve_receiver(settings, bootstrap, profile, stop, on_ready=lambda receiver: print(
            f"otlp-receiver: {receiver.url} -> topic {settings.otlp_topic} on {bootstrap}"
            + (f" (503 while consumer group {settings.group(INGEST_OTLP.name)} has no member)"
               if settings.otlp_require_ingest else ""), file=sys.stderr, flush=True))
    print(f"otlp-receiver stopped: {counters}", file=sys.stderr)
    return 0
