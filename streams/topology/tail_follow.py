"""``combee tail``'s loop: a single-partition topic read from its beginning, each record printed as the lines it
gives, and (in review mode) each new review decision as a line of its own.

On Tansu a record read past (written later than the gapless consumer waits) is read when it comes: the records of a
playbook behind it print nothing until it is read (``streams.topology.late_reading``), and then print in the order of
the reading rule, each once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TextIO

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from streams.broker.profile import BrokerProfile
from streams.topology.late_reading import LateReading
from streams.topology.tail_review import ReviewSoFar
from streams.topology.topic_reader import TopicReader

Counts = Callable[[str, int, int], bool]
"""``counts(playbook_id, expected, number)``: whether the record at hand, numbered ``number`` when the reading rule's
next number is ``expected``, counts (the next number, and no record read past before it)."""


def _counts(late: LateReading, record: ConsumerRecord, now: float) -> Counts:
    return lambda key, expected, number: late.counts(record, key, expected, number, number == expected, now)


async def follow_lines(bootstrap: str, profile: BrokerProfile, topic: str,
                       lines_for: Callable[[ConsumerRecord, Counts], list[str]], *, limit: int | None,
                       stop: asyncio.Event,
                       out: TextIO, on_following: Callable[[str], None] | None, review: ReviewSoFar | None = None,
                       playbook_id: str | None = None) -> int:
    """Print ``lines_for(record, counts)`` for every record of single-partition ``topic`` from its beginning, until
    ``stop`` or ``limit`` records that printed something; returns how many did. With ``review``, each new review
    decision is a line too (not counted)."""
    printed = 0
    async with TopicReader(bootstrap, profile, what="the tail consumer") as reader:
        start: dict[TopicPartition, int | None] = {TopicPartition(topic, 0): None}
        if review is not None:
            start[review.tp] = review.end
        await reader.assign(start)
        late = LateReading(reader, "combee tail")
        await late.started(start)
        if on_following is not None:
            on_following(topic)
        while not stop.is_set():
            batch = await reader.fetch(timeout_ms=250)
            now = time.monotonic()
            for record in (record for records in batch.values() for record in records):
                new = late.new(record, now)
                if review is not None and record.topic == review.tp.topic:
                    for line in review.lines(record, playbook_id) if new else ():
                        print(line, file=out, flush=True)
                    continue
                lines = lines_for(record, _counts(late, record, now))
                if not lines:
                    continue
                for line in lines:
                    print(line, file=out, flush=True)
                printed += 1
                if limit is not None and printed >= limit:
                    return printed
            late.reread(now)
    return printed
