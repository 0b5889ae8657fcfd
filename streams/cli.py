"""The ``combee`` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from combee_core.errors import CombeeError
from combee_core.settings import CombeeSettings
from combee_core.topology import STAGES, Topic

if TYPE_CHECKING:
    from streams.broker import BrokerProfile

log = logging.getLogger("combee")
T = TypeVar("T")


def _add_common(parser: argparse.ArgumentParser, *, run: bool = True, run_id: bool | None = None) -> None:
    """Broker and topic flags; ``run``: also ``--run-id`` and ``--seed`` (``run_id`` alone overrides for
    ``--run-id``: commands that read consumer groups but make no random choice)."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env COMBEE_KAFKA_BOOTSTRAP); none -> the "
                        "broker `combee broker` runs on this machine")
    parser.add_argument("--embedded", action="store_true",
                        help="without --bootstrap: start a throwaway in-memory broker for this command only")
    parser.add_argument("--connect-timeout", dest="broker_connect_timeout_s", type=float,
                        help="seconds to wait for the broker to answer at start (default 5); then exit 2")
    parser.add_argument("--prefix", dest="topic_prefix", help="topic prefix (default combee.)")
    if run if run_id is None else run_id:
        parser.add_argument("--run-id", help="run id, names the consumer groups")
    if run:
        parser.add_argument("--seed", dest="run_seed", type=int, help="run seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_pipeline(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, llm_record: bool = True) -> None:
    parser.add_argument("--batch-size", help="batch size: a number, or 'auto' for the controller")
    parser.add_argument("-p", "--copies", dest="p", type=int, help="copies per reflection in the shuffle (p)")
    parser.add_argument("--subgroups", choices=["sqrt", "single"], help="sqrt (Combee) or single (naive)")
    parser.add_argument("--max-fan-in", type=int, help="most items one LLM call may read")
    parser.add_argument("--max-wait", dest="max_wait_s", type=float, help="close a batch after this many seconds")
    parser.add_argument("--partitions", type=int, help="partitions of scaled topics")
    parser.add_argument("--dedupe-horizon", type=int,
                        help="batched trace ids remembered per playbook to drop resends (default 1000000)")
    parser.add_argument("--model", help="LLM model name for all roles (litellm name, e.g. combee-sim/default)")
    parser.add_argument("--promotion", action="store_const", const=True,
                        help="gate versions: score each candidate on the held-out set, serve only promoted ones "
                        "(env COMBEE_PROMOTION)")
    parser.add_argument("--epsilon", dest="promotion_epsilon", type=float,
                        help="promotion rule: promote when held_out >= incumbent - epsilon (default 0)")
    if llm_record:
        parser.add_argument("--llm-record", choices=["off", "record", "replay"],
                            help="record LLM calls to --llm-record-file, or answer them from the record "
                            "(docs/replay.md)")
        parser.add_argument("--llm-record-file", help="JSONL call store for --llm-record")


def _add_loss_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker-loss-grace", dest="broker_loss_grace_s", type=float,
                        help="seconds without an answer from the broker before stopping with exit 3 (default 60)")


PIPELINE_FLAGS = ("topic_prefix", "run_id", "run_seed", "p", "subgroups", "max_fan_in", "max_wait_s", "partitions",
                  "dedupe_horizon", "promotion", "promotion_epsilon", "llm_record", "llm_record_file",
                  "broker_connect_timeout_s", "broker_loss_grace_s")
"""Flags named after the setting they override (see ``_add_common`` and ``_add_pipeline``)."""


def flag_overrides(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The settings the given flags override: ``names`` as they are, plus ``--bootstrap``, ``--batch-size``
    (a number, or ``auto`` for the controller) and ``--model`` (every role). Flags not given are left out."""
    overrides = {name: getattr(args, name, None) for name in names}
    overrides["kafka_bootstrap"] = getattr(args, "bootstrap", None)
    batch_size = getattr(args, "batch_size", None)
    if batch_size == "auto":
        overrides["auto_batch_size"] = True
    elif batch_size is not None:
        overrides["batch_size"] = batch_size
    model = getattr(args, "model", None)
    if model:
        overrides.update(reflector_model=model, aggregator_model=model, reducer_model=model)
    return {name: value for name, value in overrides.items() if value is not None}


def settings_from_args(args: argparse.Namespace) -> CombeeSettings:
    """Settings from the environment, overridden by the flags given."""
    return CombeeSettings.load(**flag_overrides(args, PIPELINE_FLAGS))


NO_BROKER_HELP = ("no broker: pass --bootstrap HOST:PORT (or set COMBEE_KAFKA_BOOTSTRAP), or start one with "
                  "`combee broker` in another terminal (commands on this machine then find it), or pass --embedded "
                  "for a throwaway in-memory broker that stops with this command")


@contextlib.asynccontextmanager
async def broker_for(settings: CombeeSettings, *, embedded: bool = False) -> AsyncIterator[tuple[str, BrokerProfile]]:
    """Yield (bootstrap, profile): the configured broker; else, with ``embedded``, a throwaway Tansu started for
    this command; else the broker a running ``combee broker`` recorded. None of these: :class:`NoBrokerFound`.
    A broker that does not answer within ``broker_connect_timeout_s``: :class:`BrokerUnreachable`."""
    from streams.broker import BrokerProfile, EmbeddedBroker, NoBrokerFound, check_broker, detect_profile
    from streams.broker_state import read_record

    bootstrap = settings.kafka_bootstrap
    if not bootstrap and not embedded:
        record = read_record()
        if record is None:
            raise NoBrokerFound(NO_BROKER_HELP)
        bootstrap = record.bootstrap
        print(f"Using the broker at {bootstrap} (`combee broker`, pid {record.pid}, storage {record.storage}).",
              file=sys.stderr)
    if bootstrap:
        await check_broker(bootstrap, timeout_s=settings.broker_connect_timeout_s)
        if settings.broker_kind == "auto":
            profile = await detect_profile(bootstrap)
        else:
            profile = BrokerProfile.for_kind(settings.broker_kind)
        yield bootstrap, profile
        return
    broker = EmbeddedBroker()
    await broker.start_async()  # spawned from the event loop's thread: the broker dies with this process
    print(f"Started a throwaway embedded broker (Tansu) at {broker.bootstrap}. Its data lives in memory only, for as "
          f"long as this command runs.", file=sys.stderr)
    try:
        yield broker.bootstrap, BrokerProfile.for_tansu()
    finally:
        await asyncio.to_thread(broker.stop)


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def cmd_broker(args: argparse.Namespace) -> int:
    from streams.broker import MEMORY_STORAGE, EmbeddedBroker
    from streams.broker_state import BrokerRecord, clear_record, read_record, write_record

    broker = EmbeddedBroker(port=args.port, storage=args.storage or MEMORY_STORAGE)
    await broker.start_async()  # spawned from the event loop's thread: the broker dies with this process
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
        stop = asyncio.Event()
        _stop_on_signals(stop)
        exit_code = await _wait_for_stop_or_exit(stop, broker)
    finally:
        clear_record()
        await broker.stop_async()
    if exit_code is not None:
        from streams.broker import BrokerLost

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


async def cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    stop = asyncio.Event()
    _stop_on_signals(stop)
    async with contextlib.AsyncExitStack() as exits:
        from streams.health import WorkerReadiness, announce_ready

        readiness, metrics = WorkerReadiness(), None
        if args.health_port is not None:  # first, so that liveness answers while the LLM layer imports
            from streams.health import HealthServer
            from streams.metrics import WorkerMetrics

            metrics = WorkerMetrics(readiness)
            health = await exits.enter_async_context(
                HealthServer(readiness.report, port=args.health_port, metrics=metrics.render))
            print(f"worker: health on :{health.port} (/healthz, /readyz, /metrics)", file=sys.stderr)
        from streams.worker import STOP_BUDGET_S, parse_stages, run_worker

        stages = parse_stages(args.stages)
        bootstrap, profile = await exits.enter_async_context(broker_for(settings, embedded=args.embedded))
        print(f"worker: stages {', '.join(stages)} on {bootstrap}, topics {settings.topic_prefix}*", file=sys.stderr)
        work = run_worker(settings, bootstrap, profile, stages, stop=stop, readiness=readiness,
                          on_call=metrics.observe_call if metrics is not None else None)
        announcer = asyncio.create_task(announce_ready(readiness, stop, lambda line: print(line, file=sys.stderr,
                                                                                           flush=True)))
        exits.callback(announcer.cancel)
        counters = await until_stopped(work, stop, STOP_BUDGET_S + 0.5)  # e.g. a stop while creating the topics
    print(f"worker stopped: {counters if counters is not None else 'cancelled while starting'}", file=sys.stderr)
    return 0


async def until_stopped(work: Awaitable[T], stop: asyncio.Event, budget_s: float) -> T | None:
    """Await ``work``; once ``stop`` is set, give it ``budget_s`` more, then cancel it and return None."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait([task], timeout=budget_s)
    finally:
        stopper.cancel()
    if not task.done():
        log.warning("did not stop within %.1f s of the stop request; cancelled", budget_s)
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
        return None
    return task.result()


async def cmd_produce(args: argparse.Namespace) -> int:
    from streams.produce import load_traces, produce_traces

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


async def cmd_tail(args: argparse.Namespace) -> int:
    from streams.broker import list_topics
    from streams.broker_watch import BrokerWatchdog, watching
    from streams.observe import tail_versions

    settings = settings_from_args(args)
    stop = asyncio.Event()
    _stop_on_signals(stop)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        topic = settings.topic(Topic.PLAYBOOK)
        existing = await list_topics(bootstrap, settings.topic_prefix)
        if topic not in existing:
            print(f"Waiting for {topic}: no worker has run with prefix {settings.topic_prefix} on {bootstrap} yet.",
                  file=sys.stderr, flush=True)
        promoted = not args.candidates and (settings.promotion or await has_records(
            bootstrap, profile, settings.topic(Topic.PROMOTED)))
        if promoted:
            print(f"following promoted versions ({settings.topic(Topic.PROMOTED)}); --candidates for every version",
                  file=sys.stderr, flush=True)
        watchdog = BrokerWatchdog(bootstrap, settings.broker_loss_grace_s, stop, topics=[topic], seen=existing)
        async with watching(watchdog):
            await tail_versions(settings, bootstrap, profile, playbook_id=args.playbook, limit=args.max_versions,
                                stop=stop, out=sys.stdout, promoted=promoted,
                                on_following=lambda name: print(f"tail: following {name} on {bootstrap}",
                                                                file=sys.stderr, flush=True))
    if watchdog.cause is not None:
        raise watchdog.cause
    return 0


async def has_records(bootstrap: str, profile, topic: str) -> bool:
    """Whether a single-partition topic holds any record now (False when it does not exist)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.runtime import consumer_config, end_offsets

    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, profile, None))
    await consumer.start()
    try:
        if topic not in await consumer.topics():
            return False
        tp = TopicPartition(topic, 0)
        return (await end_offsets(consumer, profile, [tp]))[tp] > 0
    finally:
        await consumer.stop()


async def cmd_status(args: argparse.Namespace) -> int:
    from streams.observe import collect_status, format_status

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        status = await collect_status(settings, bootstrap, profile)
    print(format_status(status))
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    from combee_core.schema_export import schema_drift, write_schemas

    directory = Path(args.dir)
    if args.check:
        drift = schema_drift(directory)
        if drift:
            print(f"schemas out of date: {', '.join(drift)} (run `combee schemas`)", file=sys.stderr)
            return 1
        print("schemas are up to date")
        return 0
    for path in write_schemas(directory):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="combee", description="Combee Streams: parallel prompt learning on Kafka")
    sub = parser.add_subparsers(dest="command", required=True)

    broker = sub.add_parser("broker", help="run the embedded Tansu broker; other commands here find it")
    broker.add_argument("--port", type=int, help="port (default: a free one)")
    broker.add_argument("--storage", help="Tansu storage engine: memory://tansu/ (default; lost on stop), "
                        "or s3://BUCKET/ (kept; AWS_* variables set the endpoint and credentials); docs/broker.md")
    broker.add_argument("-v", "--verbose", action="store_true")

    worker = sub.add_parser("worker", help="run all stages or a subset")
    _add_common(worker)
    _add_pipeline(worker)
    promotion_only = " and ".join(stage.name for stage in STAGES if stage.promotion_only)
    worker.add_argument("--stages", help=f"comma-separated: {','.join(stage.name for stage in STAGES)} "
                        f"(default all; {promotion_only} only with --promotion)")
    worker.add_argument("--health-port", type=int,
                        help="serve /healthz, /readyz and Prometheus /metrics on this port (0: a free one); "
                        "docs/operations.md")
    _add_loss_grace(worker)

    produce = sub.add_parser("produce", help="validate and publish traces from a JSONL file or stdin")
    _add_common(produce, run=False)
    produce.add_argument("file", help="JSONL file of traces, or - for stdin")
    produce.add_argument("--skip-invalid", action="store_true", help="send the valid lines even if some are not")

    tail = sub.add_parser("tail", help="print playbook versions as they arrive")
    _add_common(tail, run=False)
    tail.add_argument("--playbook", help="only this playbook id")
    tail.add_argument("--max-versions", type=int, help="exit after this many versions (decisions with promotion)")
    tail.add_argument("--promotion", action="store_const", const=True, help="the run promotes versions (env "
                      "COMBEE_PROMOTION): print its promotion decisions and the served versions (the default when "
                      "the run's promoted topic already holds a decision)")
    tail.add_argument("--candidates", action="store_true", help="print every candidate version, promoted or not")
    _add_loss_grace(tail)

    status = sub.add_parser("status", help="topics, lag per stage, version and batch size per playbook")
    _add_common(status, run=False, run_id=True)  # the run id names the groups whose lag it shows

    schemas = sub.add_parser("schemas", help="write or check the JSON Schemas")
    schemas.add_argument("--dir", default="schemas")
    schemas.add_argument("--check", action="store_true")

    for add_parser in _plugin_parsers():
        add_parser(sub)
    return parser


PLUGIN_MODULES = ("streams.demo_cli", "streams.replay_cli", "streams.model_cli", "streams.playbook_cli",
                  "streams.promote_cli")
"""Modules that add sub-commands: each defines ``add_parser(subparsers)``, whose parsers set ``handler``."""


def _plugin_parsers():
    import importlib

    for name in PLUGIN_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            continue
        yield module.add_parser


COMMANDS = {
    "broker": cmd_broker,
    "worker": cmd_worker,
    "produce": cmd_produce,
    "tail": cmd_tail,
    "status": cmd_status,
    "schemas": cmd_schemas,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    root = logging.getLogger()
    existing = list(root.handlers)
    logging.basicConfig(
        level=logging.DEBUG if verbose else os.environ.get("COMBEE_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:  # only on the handler made here (a host's own logging, e.g. pytest's, is left alone)
        from streams.log_flood import limit_repeated_logs

        limit_repeated_logs([handler for handler in root.handlers if handler not in existing])
    handler = COMMANDS.get(args.command) or args.handler  # a plugin's parser sets ``handler``
    try:
        result: Any = handler(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a CombeeError (every expected failure of ours), or a library's broker/file error
        code = expected_failure_code(error)
        if code is None:
            raise
        print(f"combee {args.command}: {describe_failure(error)}", file=sys.stderr)
        return code


def expected_failure_code(error: BaseException) -> int | None:
    """The exit status for a failure a user can expect (and fix), None for a bug (which keeps its traceback).

    A :class:`~combee_core.errors.CombeeError` says its own (3: a running command lost its broker; 2: everything
    else a user can fix: settings, no or unreachable broker, a bad file, an LLM that fails ...); broker errors and
    a missing or unreadable file exit 2."""
    from aiokafka.errors import KafkaError

    if isinstance(error, CombeeError):
        return error.exit_code
    if isinstance(error, (KafkaError, FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError)):
        return 2
    return None


def describe_failure(error: BaseException) -> str:
    """One line for an expected failure (a broker start failure keeps the broker's log lines under it)."""
    from aiokafka.errors import KafkaError

    from streams.broker import BrokerStartError

    if isinstance(error, BrokerStartError):
        return str(error)
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, KafkaError):
        return f"broker error: {type(error).__name__}: {text}"
    if isinstance(error, OSError) and not isinstance(error, CombeeError) and error.filename:
        return f"{error.strerror}: {error.filename}"
    return text


if __name__ == "__main__":
    sys.exit(main())
