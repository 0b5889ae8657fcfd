"""``combee tail``: print playbook versions (or promotion decisions) as they arrive."""

from __future__ import annotations

import argparse
import asyncio
import sys

from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.cli.flags import add_common, add_loss_grace, settings_from_args
from streams.cli.running import broker_for, stop_on_signals


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    tail = subparsers.add_parser("tail", help="print playbook versions as they arrive")
    add_common(tail, run=False)
    tail.add_argument("--playbook", help="only this playbook id")
    tail.add_argument("--max-versions", type=int, help="exit after this many versions (decisions with promotion)")
    tail.add_argument("--promotion", action="store_const", const=True, help="the run promotes versions (env "
                      "COMBEE_PROMOTION): print its promotion decisions and the served versions (the default when "
                      "the run's promoted topic already holds a decision)")
    tail.add_argument("--candidates", action="store_true", help="print every candidate version, promoted or not")
    add_loss_grace(tail)
    tail.set_defaults(handler=cmd_tail)


async def cmd_tail(args: argparse.Namespace) -> int:
    from streams.broker.admin import list_topics
    from streams.broker.watchdog import BrokerWatchdog, watching
    from streams.topology.observe import tail_versions

    settings = settings_from_args(args)
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        topic = settings.topic(Topic.PLAYBOOK)
        existing = await list_topics(bootstrap, settings.topic_prefix, connection=profile.connection)
        if topic not in existing:
            print(f"Waiting for {topic}: no worker has run with prefix {settings.topic_prefix} on {bootstrap} yet.",
                  file=sys.stderr, flush=True)
        promoted = not args.candidates and (settings.promotion or await has_records(
            bootstrap, profile, settings.topic(Topic.PROMOTED)))
        if promoted:
            print(f"following promoted versions ({settings.topic(Topic.PROMOTED)}); --candidates for every version",
                  file=sys.stderr, flush=True)
        elif not args.candidates:  # chosen once: a stream that changed format midway would break its readers
            print(f"following every candidate version ({topic}): the run has no promotion decision yet; in a run "
                  "that promotes, pass --promotion (or COMBEE_PROMOTION=1) to follow its decisions from the start",
                  file=sys.stderr, flush=True)
        # every topic of the run, not only the one followed: Tansu creates a topic a consumer asks metadata for, so
        # a broker restarted without its data soon has the followed topic again (empty), and the others tell
        watchdog = BrokerWatchdog(bootstrap, settings.broker_loss_grace_s, stop, topics=sorted({topic, *existing}),
                                   seen=existing, connection=profile.connection)
        async with watching(watchdog):
            await tail_versions(settings, bootstrap, profile, playbook_id=args.playbook, limit=args.max_versions,
                                stop=stop, out=sys.stdout, promoted=promoted,
                                on_following=lambda name: print(f"tail: following {name} on {bootstrap}",
                                                                file=sys.stderr, flush=True))
    if watchdog.cause is not None:
        raise watchdog.cause
    return 0


async def has_records(bootstrap: str, profile: BrokerProfile, topic: str) -> bool:
    """Whether a single-partition topic holds any record now (False when it does not exist)."""
    from aiokafka import TopicPartition

    from streams.topology.topic_reader import TopicReader

    async with TopicReader(bootstrap, profile, what="the tail probe") as reader:
        if topic not in await reader.topics():
            return False
        tp = TopicPartition(topic, 0)
        return (await reader.end_offsets([tp]))[tp] > 0
