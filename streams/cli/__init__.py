"""The ``combee`` command line: one entry point, one sub-command per job (a module of this package each); errors a
user can expect are one line and a non-zero exit."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from combee_core.errors import CombeeError
from streams.cli import (
    broker,
    demo,
    dlq,
    judge,
    key,
    model,
    otlp_receiver,
    playbook,
    produce,
    promote,
    replay,
    review,
    schemas,
    serve,
    status,
    tail,
    tasks,
    ui,
    worker,
)

SUBCOMMAND_MODULES = (broker, worker, produce, tail, status, dlq, schemas, demo, replay, model, playbook, promote,
                      review, ui, otlp_receiver, serve, key, tasks, judge)
"""Each defines ``add_parser(subparsers)``, whose parsers set ``handler`` (in the order ``--help`` lists them)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="combee", description="Combee Streams: parallel prompt learning on Kafka")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMAND_MODULES:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    root = logging.getLogger()
    existing = list(root.handlers)
    level = logging.DEBUG if verbose else os.environ.get("COMBEE_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().isEnabledFor(logging.DEBUG) and "COMBEE_KAFKA_DEBUG" not in os.environ:
        # -v or COMBEE_LOG_LEVEL=DEBUG: aiokafka's DEBUG lines are every request and record it sends (masked by
        # streams.broker.log_mask, and still a flood): kept at INFO unless asked for (docs/redaction.md)
        logging.getLogger("aiokafka").setLevel(logging.INFO)
    if not verbose:  # only on the handler made here (a host's own logging, e.g. pytest's, is left alone)
        from streams.cli.log_flood import limit_repeated_logs

        limit_repeated_logs([handler for handler in root.handlers if handler not in existing])
    handler = args.handler
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

    from streams.broker.errors import BrokerStartError

    if isinstance(error, BrokerStartError):
        return str(error)
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, KafkaError):
        return f"broker error: {type(error).__name__}: {text}"
    if isinstance(error, OSError) and not isinstance(error, CombeeError) and error.filename:
        return f"{error.strerror}: {error.filename}"
    return text
