"""``combee dlq``: list the dead letters on the ``dlq`` topic, filtered by stage, reason class and reason text, with
the original bytes on request (``--raw``: to fix and produce again) or each letter's JSON (``--json``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from combee_core.errors import CombeeError
from combee_core.models import DeadLetter
from combee_core.runs.dead_letter_query import DeadLetterFilter, describe_dead_letter, original_bytes, summarise
from combee_core.topology import STAGES, Topic
from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for, stop_on_signals

DEFAULT_LIMIT = 20


class UnknownStageFilter(CombeeError, ValueError):
    """``--stage`` names no stage."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    dlq = subparsers.add_parser("dlq", help="list dead letters, filtered by stage and reason; the original bytes "
                                "with --raw")
    add_common(dlq, run=False)
    dlq.add_argument("--stage", help=f"only this stage's ({', '.join(stage.name for stage in STAGES)})")
    dlq.add_argument("--error-type", help="only this reason class (e.g. TraceRejected, ValidationError, StaleTrace, "
                     "NotLearned, LLMOutputError; docs/operations.md)")
    dlq.add_argument("--reason", help="only those whose reason contains this text (case-insensitive)")
    dlq.add_argument("--playbook", help="only this playbook's")
    dlq.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                     help=f"show the newest N matches (default {DEFAULT_LIMIT}; 0 for all)")
    dlq.add_argument("--follow", action="store_true", help="then print new matches as they arrive, until Ctrl-C")
    output = dlq.add_mutually_exclusive_group()
    output.add_argument("--raw", action="store_true", help="print each match's original bytes (one record per "
                        "line, as produced; the first 64 KiB of a larger one) instead of the summary line")
    output.add_argument("--json", action="store_true", help="print each match as its DeadLetter JSON")
    dlq.set_defaults(handler=cmd_dlq)


def letter_writer(args: argparse.Namespace) -> Callable[[DeadLetter, int], None]:
    """How one matching dead letter is printed: its line, its JSON, or its original bytes."""
    def write(letter: DeadLetter, offset: int) -> None:
        if args.raw:
            if letter.truncated:
                print(f"dlq #{offset}: only the first {len(original_bytes(letter))} of {letter.original_size} bytes "
                      "were kept", file=sys.stderr)
            sys.stdout.buffer.write(original_bytes(letter) + b"\n")
            sys.stdout.buffer.flush()
        elif args.json:
            print(letter.model_dump_json(), flush=True)
        else:
            print(describe_dead_letter(letter, offset), flush=True)
    return write


async def cmd_dlq(args: argparse.Namespace) -> int:
    from streams.topology.topic_reader import read_topic

    if args.stage is not None and args.stage not in {stage.name for stage in STAGES}:
        raise UnknownStageFilter(f"no stage {args.stage!r}; stages: {', '.join(stage.name for stage in STAGES)}")
    if args.limit < 0:
        raise UnknownStageFilter("--limit must be 0 (all) or more")
    settings = settings_from_args(args)
    wanted = DeadLetterFilter(stage=args.stage, error_type=args.error_type, reason=args.reason,
                              playbook_id=args.playbook)
    write = letter_writer(args)
    topic = settings.topic(Topic.DLQ)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        records = await read_topic(bootstrap, profile, topic)
        letters, unreadable = decode(records)
        matching = [(offset, letter) for offset, letter in letters if wanted.matches(letter)]
        shown = matching[-args.limit:] if args.limit else matching
        for offset, letter in shown:
            write(letter, offset)
        print(f"dlq: {len(matching)} of {len(letters)} dead letter(s) on {topic} match ({wanted.describe()})"
              + (f"; the newest {len(shown)} shown (--limit)" if len(shown) < len(matching) else "")
              + (f"; {unreadable} record(s) were not dead letters" if unreadable else ""), file=sys.stderr)
        if matching and not args.raw and not args.json:
            kinds = ", ".join(f"{stage} {error_type} {count}" for stage, error_type, count in
                              summarise(letter for _, letter in matching))
            print(f"dlq: by stage and reason class: {kinds}", file=sys.stderr)
        if args.follow:
            stop = asyncio.Event()
            stop_on_signals(stop)
            start = records[-1].offset + 1 if records else 0
            print(f"dlq: following {topic} from offset {start} (Ctrl-C to stop)", file=sys.stderr, flush=True)
            await follow(bootstrap, profile, topic, start, wanted, write, stop)
    return 0


def decode(records) -> tuple[list[tuple[int, DeadLetter]], int]:
    """(offset, dead letter) of each record that is one, and how many were not."""
    letters, unreadable = [], 0
    for record in records:
        try:
            letters.append((record.offset, DeadLetter.from_json_bytes(record.value)))
        except ValueError:
            unreadable += 1
    return letters, unreadable


async def follow(bootstrap: str, profile, topic: str, start: int, wanted: DeadLetterFilter,
                 write: Callable[[DeadLetter, int], None], stop: asyncio.Event) -> None:
    """Print the matches among ``topic``'s records from ``start`` on, until ``stop``."""
    from aiokafka import TopicPartition

    from streams.topology.topic_reader import TopicReader

    async with TopicReader(bootstrap, profile, what="the dlq consumer") as reader:
        await reader.assign({TopicPartition(topic, 0): start})
        async for records in reader.follow(stop, timeout_ms=250):
            for offset, letter in decode(records)[0]:
                if wanted.matches(letter):
                    write(letter, offset)
