"""``combee broker``: the embedded Tansu broker alone, recorded so that other commands on this machine find it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from streams.cli.running import stop_on_signals

MEMORY_STOP_S = 2.0
"""Seconds Tansu gets to exit on SIGTERM with in-memory storage (it waits for connected clients; nothing to keep)."""
STORED_STOP_S = 5.0
"""The same with stored topics, which it may still be writing."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run the embedded Tansu broker; other commands here find it")
    broker.add_argument("--port", type=int, help="port (default: a free one)")
    broker.add_argument("--storage", help="Tansu storage engine: memory://tansu/ (default; lost on stop), "
                        "or s3://BUCKET/ (kept; AWS_* variables set the endpoint and credentials); docs/broker.md")
    broker.add_argument("-v", "--verbose", action="store_true")
    broker.set_defaults(handler=cmd_broker)


async def cmd_broker(args: argparse.Namespace) -> int:
    from streams.broker.state import BrokerRecord, clear_record, read_record, write_record
    from streams.broker.tansu import MEMORY_STORAGE, EmbeddedBroker

    broker = EmbeddedBroker(port=args.port, storage=args.storage or MEMORY_STORAGE)
    await broker.start_async()  # spawned from the event loop's thread: the broker dies with this process
    stop = asyncio.Event()
    stop_on_signals(stop)  # before the address is printed: whoever reads it may signal at once
    try:
        previous = read_record()
        path = write_record(BrokerRecord.now(broker.bootstrap, broker.storage))
        print(broker.bootstrap, flush=True)
        if previous is not None:
            print(f"Note: the broker at {previous.bootstrap} (pid {previous.pid}) is still running; commands without "
                  f"--bootstrap now use this one.", file=sys.stderr)
        keeps = ("memory only: its data is lost when it stops" if broker.storage.startswith("memory:")
                 else "topics and offsets kept across restarts")
        print(f"Embedded Tansu broker running at {broker.bootstrap}, storage {broker.storage} ({keeps}). Recorded in "
              f"{path}: combee commands on this machine use it without --bootstrap. Ctrl-C stops it.",
              file=sys.stderr, flush=True)
        exit_code = await _wait_for_stop_or_exit(stop, broker)
    finally:
        clear_record()
        memory = broker.storage.startswith("memory:")
        grace = MEMORY_STOP_S if memory else STORED_STOP_S  # in memory there is nothing to flush
        if exit_code is None:
            print(f"Stopping the broker at {broker.bootstrap} (up to {grace:g} s while clients are connected)...",
                  file=sys.stderr, flush=True)
        await broker.stop_async(grace)
        if exit_code is None:
            print("Broker stopped.", file=sys.stderr, flush=True)
    if exit_code is not None:
        from streams.broker.errors import BrokerLost

        raise BrokerLost(f"the Tansu broker process at {broker.bootstrap} {_describe_exit(exit_code)}; last log "
                         f"line: {broker.log_tail(1).strip() or '(none)'}")
    return 0


async def _wait_for_stop_or_exit(stop: asyncio.Event, broker, poll_s: float = 0.5) -> int | None:
    """Wait until ``stop`` is set (None) or the broker's process exits (its exit code)."""
    while not stop.is_set():
        code = broker.exit_code()
        if code is not None:
            return code
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), poll_s)
    return None


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
