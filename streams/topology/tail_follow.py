"""``combee tail``'s loop: a single-partition topic read from its beginning, each record printed as the lines it
gives, and (in review mode) each new review decision as a line of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TextIO

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from streams.broker.profile import BrokerProfile
from streams.topology.tail_review import ReviewSoFar
from streams.topology.topic_reader import TopicReader


async def follow_lines(bootstrap: str, profile: BrokerProfile, topic: str,
                       lines_for: Callable[[ConsumerRecord], list[str]], *, limit: int | None, stop: asyncio.Event,
                       out: TextIO, on_following: Callable[[str], None] | None, review: ReviewSoFar | None = None,
                       playbook_id: str | None = None) -> int:
    """Print ``lines_for(record)`` for every record of single-partition ``topic`` from its beginning, until ``stop``
    or ``limit`` records that printed something; returns how many did. With ``review``, each new review decision
    is a line too (not counted)."""
    printed = 0
    async with TopicReader(bootstrap, profile, what="the tail consumer") as reader:
        start: dict[TopicPartition, int | None] = {TopicPartition(topic, 0): None}
        if review is not None:
            start[review.tp] = review.end
        await reader.assign(start)
        if on_following is not None:
            on_following(topic)
        async for records in reader.follow(stop, timeout_ms=250):
            for record in records:
                if review is not None and record.topic == review.tp.topic:
                    for line in review.lines(record, playbook_id):
                        print(line, file=out, flush=True)
                    continue
                lines = lines_for(record)
                if not lines:
                    continue
                for line in lines:
                    print(line, file=out, flush=True)
                printed += 1
                if limit is not None and printed >= limit:
                    return printed
    return printed
