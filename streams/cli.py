"""The ``combee`` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from combee_core.settings import CombeeSettings, SettingsError

log = logging.getLogger("combee")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env COMBEE_KAFKA_BOOTSTRAP); "
                        "none -> start the embedded broker")
    parser.add_argument("--prefix", dest="topic_prefix", help="topic prefix (default combee.)")
    parser.add_argument("--run-id", help="run id, names the consumer groups")
    parser.add_argument("--seed", dest="run_seed", type=int, help="run seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_pipeline(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", help="batch size: a number, or 'auto' for the controller")
    parser.add_argument("-p", "--copies", dest="p", type=int, help="copies per reflection in the shuffle (p)")
    parser.add_argument("--subgroups", choices=["sqrt", "single"], help="sqrt (Combee) or single (naive)")
    parser.add_argument("--max-fan-in", type=int, help="most items one LLM call may read")
    parser.add_argument("--max-wait", dest="max_wait_s", type=float, help="close a batch after this many seconds")
    parser.add_argument("--partitions", type=int, help="partitions of scaled topics")
    parser.add_argument("--dedupe-horizon", type=int,
                        help="batched trace ids remembered per playbook to drop resends (default 1000000)")
    parser.add_argument("--model", help="LLM model name for all roles (litellm name, e.g. combee-sim/default)")
    parser.add_argument("--llm-record", choices=["off", "record", "replay"],
                        help="record LLM calls to --llm-record-file, or answer them from the record (docs/replay.md)")
    parser.add_argument("--llm-record-file", help="JSONL call store for --llm-record")


PIPELINE_FLAGS = ("topic_prefix", "run_id", "run_seed", "p", "subgroups", "max_fan_in", "max_wait_s", "partitions",
                  "dedupe_horizon", "llm_record", "llm_record_file")
"""Flags named after the setting they override (see ``_add_common`` and ``_add_pipeline``)."""


def flag_overrides(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, object]:
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


@contextlib.asynccontextmanager
async def broker_for(settings: CombeeSettings) -> AsyncIterator[tuple[str, object]]:
    """Yield (bootstrap, profile): the configured broker, or an embedded Tansu started for this command."""
    from streams.broker import BrokerProfile, EmbeddedBroker, detect_profile, wait_for_broker

    if settings.kafka_bootstrap:
        await wait_for_broker(settings.kafka_bootstrap, timeout_s=30)
        if settings.broker_kind == "auto":
            profile = await detect_profile(settings.kafka_bootstrap)
        else:
            profile = BrokerProfile.for_kind(settings.broker_kind)
        yield settings.kafka_bootstrap, profile
        return
    broker = EmbeddedBroker()
    await asyncio.to_thread(broker.start)
    print(f"Started the embedded broker (Tansu) at {broker.bootstrap}. Its data lives in memory only, for as long "
          f"as this command runs. Use --bootstrap to point at a lasting Kafka.", file=sys.stderr)
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
    from streams.broker import EmbeddedBroker

    broker = EmbeddedBroker(port=args.port)
    await asyncio.to_thread(broker.start)
    print(broker.bootstrap, flush=True)
    print(f"Embedded Tansu broker running at {broker.bootstrap} (memory only; Ctrl-C stops it).", file=sys.stderr)
    stop = asyncio.Event()
    _stop_on_signals(stop)
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(broker.stop)
    return 0


async def cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    stop = asyncio.Event()
    _stop_on_signals(stop)
    async with contextlib.AsyncExitStack() as exits:
        readiness = None
        if args.health_port is not None:  # first, so that liveness answers while the LLM layer imports
            from streams.health import HealthServer, WorkerReadiness

            readiness = WorkerReadiness()
            health = await exits.enter_async_context(HealthServer(readiness.report, port=args.health_port))
            print(f"worker: health on :{health.port} (/healthz, /readyz)", file=sys.stderr)
        from streams.worker import parse_stages, run_worker

        stages = parse_stages(args.stages)
        bootstrap, profile = await exits.enter_async_context(broker_for(settings))
        print(f"worker: stages {', '.join(stages)} on {bootstrap}, topics {settings.topic_prefix}*", file=sys.stderr)
        counters = await run_worker(settings, bootstrap, profile, stages, stop=stop, readiness=readiness)
    print(f"worker stopped: {counters}", file=sys.stderr)
    return 0


async def cmd_produce(args: argparse.Namespace) -> int:
    from streams.produce import load_traces, produce_traces

    settings = settings_from_args(args)
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="strict")
    with source:
        loaded = load_traces(source)
    for error in loaded.errors:
        print(f"line {error.line}: {error.reason}", file=sys.stderr)
    if loaded.errors and not args.skip_invalid:
        print(f"{len(loaded.errors)} invalid line(s); nothing sent (use --skip-invalid to send the valid ones)",
              file=sys.stderr)
        return 2
    async with broker_for(settings) as (bootstrap, profile):
        sent = await produce_traces(settings, bootstrap, profile, loaded.traces)
    print(f"sent {sent} trace(s) to {settings.topic('traces')}", file=sys.stderr)
    return 0


async def cmd_tail(args: argparse.Namespace) -> int:
    from streams.observe import tail_versions

    settings = settings_from_args(args)
    stop = asyncio.Event()
    _stop_on_signals(stop)
    async with broker_for(settings) as (bootstrap, profile):
        await tail_versions(settings, bootstrap, profile, playbook_id=args.playbook, limit=args.max_versions,
                            stop=stop, out=sys.stdout)
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    from streams.observe import collect_status, format_status

    settings = settings_from_args(args)
    async with broker_for(settings) as (bootstrap, profile):
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

    broker = sub.add_parser("broker", help="run the embedded Tansu broker")
    broker.add_argument("--port", type=int, help="port (default: a free one)")
    broker.add_argument("-v", "--verbose", action="store_true")

    worker = sub.add_parser("worker", help="run all stages or a subset")
    _add_common(worker)
    _add_pipeline(worker)
    worker.add_argument("--stages", help="comma-separated: reflect,batch,aggregate,reduce,control (default all)")
    worker.add_argument("--health-port", type=int, help="serve /healthz and /readyz on this port (0: a free one)")

    produce = sub.add_parser("produce", help="validate and publish traces from a JSONL file or stdin")
    _add_common(produce)
    produce.add_argument("file", help="JSONL file of traces, or - for stdin")
    produce.add_argument("--skip-invalid", action="store_true", help="send the valid lines even if some are not")

    tail = sub.add_parser("tail", help="print playbook versions as they arrive")
    _add_common(tail)
    tail.add_argument("--playbook", help="only this playbook id")
    tail.add_argument("--max-versions", type=int, help="exit after this many versions")

    status = sub.add_parser("status", help="topics, lag per stage, version and batch size per playbook")
    _add_common(status)

    schemas = sub.add_parser("schemas", help="write or check the JSON Schemas")
    schemas.add_argument("--dir", default="schemas")
    schemas.add_argument("--check", action="store_true")

    for add_parser in _plugin_parsers():
        add_parser(sub)
    return parser


PLUGIN_MODULES = ("streams.demo_cli", "streams.replay_cli", "streams.model_cli")
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
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else os.environ.get("COMBEE_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler = COMMANDS.get(args.command) or getattr(args, "handler", None)
    try:
        result = handler(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except SettingsError as error:
        print(f"combee: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
