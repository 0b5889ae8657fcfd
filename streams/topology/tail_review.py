"""``combee tail`` in review mode (``COMBEE_REVIEW_PLAYBOOKS``): the ``review`` log read to its end at start, so each
version printed is marked with the decisions taken so far, then followed, each new decision a line."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import ReviewDecision
from combee_core.serve.review import ReviewBook, describe_review
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.readable import readable
from streams.topology.topic_reader import TopicReader


@dataclass
class ReviewSoFar:
    """Review mode in ``combee tail``: the ``review`` log read so far (to its end at start, then followed)."""

    tp: TopicPartition
    end: int
    book: ReviewBook = field(default_factory=ReviewBook)

    def lines(self, record: ConsumerRecord, playbook_id: str | None) -> list[str]:
        decisions = readable([record], ReviewDecision)
        if not decisions:
            return []
        decision = decisions[0]
        if not self.book.apply(decision) or (playbook_id and decision.playbook_id != playbook_id):
            return []
        return [describe_review(decision)]


async def review_so_far(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> ReviewSoFar:
    """The ``review`` log to its end now, so each version printed is marked with the decisions taken so far."""
    tp = TopicPartition(settings.topic(Topic.REVIEW), 0)
    async with TopicReader(bootstrap, profile, what="the tail's review reader") as reader:
        exists = tp.topic in await reader.topics()
        records = await reader.read_to_end([tp]) if exists else []
    review = ReviewSoFar(tp, records[-1].offset + 1 if records else 0)
    for decision in readable(records, ReviewDecision):
        review.book.apply(decision)
    return review
