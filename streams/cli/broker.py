"""``combee broker``: the embedded broker alone, recorded so that other commands on this machine find it. Durable by
default (SeaweedFS + Tansu, data under the state directory, :mod:`streams.broker.durable`); ``--memory`` or
``--storage URL`` run Tansu alone."""

from __future__ import annotations

import argparse
import asyncio
import sys

from streams.broker.stopping import stopped_within
from streams.cli.running import stop_on_signals

MEMORY_STOP_S = 2.0
"""Seconds Tansu gets to exit on SIGTERM with in-memory storage (it waits for connected clients; nothing to keep)."""
STORED_STOP_S = 5.0
"""The same with stored topics, which it may still be writing."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run the embedded broker (durable: data under COMBEE_STATE_DIR); "
                                   "other commands here find it")
    broker.add_argument("--port", type=int, help="Kafka port (default: the previous run's when free, else a free one)")
    where = broker.add_mutually_exclusive_group()
    where.add_argument("--memory", action="store_true", help="keep nothing: topics live in the broker process and "
                       "are lost when it stops (the tests' and demo's broker)")
    where.add_argument("--storage", help="Tansu alone on this storage: memory://tansu/, or s3://BUCKET/ of an S3 "
                       "service you run (AWS_* variables set the endpoint and credentials); docs/broker.md")
    broker.add_argument("--advertise", type=host_port, metavar="HOST:PORT",
                        help="the address Tansu gives clients in metadata (default: its own loopback one): a TLS "
                        "terminator's in front of it; clients then reach it only there (docs/broker.md)")
    where.add_argument("--no-fsync", dest="fsync", action="store_false",
                       help="durable broker only: answer writes before they are synced to disk (faster; a power "
                       "cut may lose the last seconds of acknowledged records; docs/broker.md)")
    broker.add_argument("--retention-hours", type=float, metavar="H",
                        help="durable broker only: delete traces, llm-calls and dlq records older than H hours, once "
                        "every consumer group has read them (default 168; 0 keeps everything; docs/broker.md)")
    broker.add_argument("-v", "--verbose", action="store_true")
    broker.set_defaults(handler=cmd_broker)


def host_port(text: str) -> str:
    """``HOST:PORT`` as given (argparse's type: anything else is refused in one line, exit 2)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. kafka.example.com:9093)")
    return text


def _advertised_note(args: argparse.Namespace, bootstrap: str) -> str:
    if not args.advertise:
        return ""
    return (f" It advertises {args.advertise}: clients that reach it at {bootstrap} are sent there for every "
            f"request, so each client (commands here too) needs --bootstrap {args.advertise} and that address's "
            f"connection settings (COMBEE_KAFKA_*).")


async def cmd_broker(args: argparse.Namespace) -> int:
    from streams.broker.errors import StorageURLError  # here: `import streams.cli` must not load aiokafka

    if args.memory or args.storage:
        if args.retention_hours is not None:
            raise StorageURLError("--retention-hours applies to the durable broker only (not with --memory or "
                                  "--storage: Tansu alone keeps every record)")
        return await _tansu_alone(args)
    return await _durable(args)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _durable(args: argparse.Namespace) -> int:
    from streams.broker.durable import RETENTION_S, DurableBroker
    from streams.broker.errors import BrokerLost, StorageURLError
    from streams.broker.state import clear_record, read_record, state_dir, write_record

    hours = args.retention_hours
    if hours is not None and hours < 0:
        raise StorageURLError(f"--retention-hours {hours:g}: give a number of hours >= 0 (0 keeps everything)")
    retention_s = RETENTION_S if hours is None else hours * 3600 if hours > 0 else None
    broker = DurableBroker(state_dir(), port=args.port, advertised=args.advertise, fsync=args.fsync,
                           retention_s=retention_s)
    broker.claim()  # a second broker on this state directory stops here, in one line
    _say(f"combee broker: data in {broker.data_dir} (COMBEE_STATE_DIR); starting the storage (SeaweedFS), then Tansu")
    await broker.start()
    assert broker.storage is not None and broker.tansu is not None
    stop = asyncio.Event()
    stop_on_signals(stop)  # before the address is printed: whoever reads it may signal at once
    reason = None
    try:
        previous = read_record()
        path = write_record(broker.record())
        print(broker.bootstrap, flush=True)
        if previous is not None:
            _say(f"Note: the broker at {previous.bootstrap} (pid {previous.pid}) is still running; commands without "
                 f"--bootstrap now use this one.")
        if broker.repairs:
            _say(f"combee broker: {len(broker.repairs)} partition(s) ended in a write torn by a kill (never "
                 f"acknowledged), cut back to their last stored record: " + ", ".join(
                     f"{r.partition} {r.high}->{r.repaired}" for r in broker.repairs[:10]))
        _say(f"Durable broker running at {broker.bootstrap} (Tansu pid {broker.tansu.pid}), storage SeaweedFS at "
             f"{broker.storage.endpoint} (pid {broker.storage.pid}), data in {broker.data_dir}: topics, records and "
             f"committed offsets survive a restart (started in {broker.start_seconds:.1f} s). Recorded in {path}: "
             f"combee commands on this machine use it without --bootstrap. Ctrl-C stops it."
             + _advertised_note(args, broker.bootstrap))
        reason = await broker.supervise(stop, _say, restarted=lambda: write_record(broker.record()))
    finally:
        clear_record()
        if reason is None:
            _say(f"Stopping the broker at {broker.bootstrap}, then its storage...")
        await broker.stop()
        if reason is None:
            _say("Broker stopped.")
    if reason is not None:
        raise BrokerLost(reason)
    return 0


async def _tansu_alone(args: argparse.Namespace) -> int:
    from streams.broker.durable import describe_exit
    from streams.broker.state import BrokerRecord, clear_record, read_record, write_record
    from streams.broker.tansu import MEMORY_STORAGE, EmbeddedBroker

    broker = EmbeddedBroker(port=args.port, storage=args.storage or MEMORY_STORAGE,
                            advertised=args.advertise)
    await broker.start_async()  # spawned from the event loop's thread: the broker dies with this process
    stop = asyncio.Event()
    stop_on_signals(stop)  # before the address is printed: whoever reads it may signal at once
    exit_code = None
    try:
        previous = read_record()
        path = write_record(BrokerRecord.now(broker.bootstrap, broker.storage, child_pids={"tansu": broker.pid}))
        print(broker.bootstrap, flush=True)
        if previous is not None:
            _say(f"Note: the broker at {previous.bootstrap} (pid {previous.pid}) is still running; commands without "
                 f"--bootstrap now use this one.")
        keeps = ("memory only: its data is lost when it stops" if broker.storage.startswith("memory:")
                 else "topics and offsets kept across restarts")
        _say(f"Embedded Tansu broker running at {broker.bootstrap}, storage {broker.storage} ({keeps}). Recorded in "
             f"{path}: combee commands on this machine use it without --bootstrap. Ctrl-C stops it."
             + _advertised_note(args, broker.bootstrap))
        exit_code = await _wait_for_stop_or_exit(stop, broker)
    finally:
        clear_record()
        memory = broker.storage.startswith("memory:")
        grace = MEMORY_STOP_S if memory else STORED_STOP_S  # in memory there is nothing to flush
        if exit_code is None:
            _say(f"Stopping the broker at {broker.bootstrap} (up to {grace:g} s while clients are connected)...")
        await broker.stop_async(grace)
        if exit_code is None:
            _say("Broker stopped.")
    if exit_code is not None:
        from streams.broker.errors import BrokerLost

        raise BrokerLost(f"the Tansu broker process at {broker.bootstrap} {describe_exit(exit_code)}; last log "
                         f"line: {broker.log_tail(1).strip() or '(none)'}")
    return 0


async def _wait_for_stop_or_exit(stop: asyncio.Event, broker, poll_s: float = 0.5) -> int | None:
    """Wait until ``stop`` is set (None) or the broker's process exits (its exit code)."""
    while not stop.is_set():
        code = broker.exit_code()
        if code is not None:
            return code
        await stopped_within(stop, poll_s)
    return None
