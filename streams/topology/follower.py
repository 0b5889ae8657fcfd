"""A subscriber of the topology's outputs, as an agent fleet or a test would be one: follows the playbook, control,
``promoted`` and dead-letter topics from their beginning, and says which playbook version an agent should run and
which traces have reached a version.

On Tansu a record read past (written later than the gapless consumer waits) does not make the follower step over it
for good: the records of a playbook behind it do not count until it is read, and the topic is read again from it
(``streams.topology.late_reading``, the rule the client's follower keeps too)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.errors import one_line
from combee_core.models import (
    CombeeModel,
    ControlDecision,
    DeadLetter,
    PlaybookEntry,
    PlaybookVersion,
    PromotionDecision,
    ReviewDecision,
)
from combee_core.promote.promotion import PromotionLedger
from combee_core.serve.review import ReviewBook
from combee_core.serve.served import served_playbook, served_to_agents
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.late_reading import LateReading
from streams.topology.topic_reader import TopicReader

_MODELS: dict[str, type[CombeeModel]] = {Topic.PLAYBOOK: PlaybookVersion, Topic.PROMOTED: PromotionDecision,
                                         Topic.REVIEW: ReviewDecision, Topic.CONTROL: ControlDecision,
                                         Topic.DLQ: DeadLetter}
log = logging.getLogger(__name__)


@dataclass
class PlaybookFollower:
    """Follows the playbook, control and dead-letter topics (and ``promoted`` with promotion on) from their
    beginning, in the background.

    ``latest`` holds the newest version per playbook, ``covered`` every trace id that is in some version's lineage
    or in a dead letter; ``on_version`` is called for each new version. With ``settings.promotion`` (and not
    ``candidates``) :meth:`playbook` is the *served* version of the ``promoted`` pointer, not the newest candidate;
    without promotion it is the newest version unless a decision on ``promoted`` (the guard's rollback, an
    operator's) says otherwise (``combee_core.guard.rule.served_without_promotion``).
    """

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    on_version: Callable[[PlaybookVersion], None] | None = None
    on_decision: Callable[[ControlDecision], None] | None = None
    """Called for each batch-size decision on the control topic (the demo shows it)."""
    check_alive: Callable[[], None] | None = None
    """Called while waiting; raises if what should produce the awaited records has died (e.g. the worker)."""
    on_promotion: Callable[[PromotionDecision], None] | None = None
    """Called for each decision on the promoted topic that counts."""
    on_review: Callable[[str], None] | None = None
    """Called with the playbook id of each review decision that counts."""
    candidates: bool = False
    """Run the newest candidate even with promotion on (``--candidates``)."""
    history: bool = True
    """Keep ``covered``, ``dead_letters`` and ``decisions`` (what a run's waits need); False for a long-running reader
    that needs only the served versions (``combee serve``): they grow with every trace."""
    latest: dict[str, PlaybookVersion] = field(default_factory=dict)
    parents: dict[str, dict[int, int]] = field(default_factory=dict)
    """Per playbook, version -> parent_version."""
    ledger: PromotionLedger = field(default_factory=PromotionLedger)
    batch_sizes: dict[str, int] = field(default_factory=dict)
    decisions: list[ControlDecision] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    read_to: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, the offset after the highest record read (``combee serve`` waits until it reaches the end)."""
    review: ReviewBook = field(default_factory=ReviewBook)
    """The ``review`` log (followed when ``settings.review_playbooks`` names any playbook)."""
    unreadable: int = 0
    """Records of the followed topics that could not be read, skipped (each logged)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task | None = None
    _reader: TopicReader | None = None
    _late: LateReading | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> PlaybookFollower:
        reader = await TopicReader(self.bootstrap, self.profile, what="the playbook follower").__aenter__()
        self._reader = reader
        tps = [TopicPartition(self.settings.topic(name), 0) for name in (Topic.PLAYBOOK, Topic.CONTROL, Topic.PROMOTED)]
        if self.settings.review_playbooks:
            tps.append(TopicPartition(self.settings.topic(Topic.REVIEW), 0))
        dlq = self.settings.topic(Topic.DLQ)
        tps += await reader.partitions(dlq, refresh=True) or [TopicPartition(dlq, 0)]
        await reader.assign(tps)
        self._late = LateReading(reader, "playbook follower")
        await self._late.started(dict.fromkeys(tps))
        self._task = asyncio.create_task(self._follow(reader, self._late))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._reader is not None:
            await self._reader.stop()

    async def _follow(self, reader: TopicReader, late: LateReading) -> None:
        followed = (Topic.PLAYBOOK, Topic.CONTROL, Topic.PROMOTED, Topic.DLQ, Topic.REVIEW)
        topics = {self.settings.topic(name): name for name in followed}
        while not self._stop.is_set():
            batch = await reader.fetch(timeout_ms=200)
            now = time.monotonic()
            for tp, records in batch.items():
                for record in records:
                    self._take(topics[record.topic], record.value, record, now)
                    self.read_to[tp] = max(self.read_to.get(tp, 0), record.offset + 1)
            late.reread(now)
            if batch:
                self._changed.set()

    def holes(self) -> tuple[tuple[str, int], ...]:
        """("topic[partition]", offset) of the records read past and not read yet (Tansu): the served versions are
        what the topics say without the records behind them, and the topics are read again until they are read."""
        return self._late.holes() if self._late is not None else ()

    def _take(self, topic: str, value: bytes, record: ConsumerRecord | None = None, now: float = 0.0) -> None:
        """One record of a followed topic (``record``: as read, for its offset; None: no hole is looked for); one that
        cannot be read is skipped, counted and logged (not this reader's to dead-letter; a foreign writer's record
        must not stop ``combee serve``). A record read again after a hole counts only if it did not before (numbered
        topics) or is not taken again (the others)."""
        if topic == Topic.DLQ and not self.history:
            return  # dead letters matter only to a run's waits
        late = self._late if record is not None else None
        new = late.new(record, now) if late is not None and record is not None else True
        if not new and topic not in (Topic.PLAYBOOK, Topic.PROMOTED):
            return
        try:
            read = _MODELS.get(topic, DeadLetter).from_json_bytes(value)
        except Exception as error:  # any failure to read the bytes is about them (RecursionError, TypeError ...)
            if new:
                self.unreadable += 1
                log.warning("playbook follower: skipping an unreadable record of %s: %s", topic, one_line(error))
            return
        if late is not None and record is not None and isinstance(read, PlaybookVersion | PromotionDecision):
            number = read.version if isinstance(read, PlaybookVersion) else read.decision_id
            expected = self._next_number(read)
            if not late.counts(record, read.playbook_id, expected, number, number == expected, now):
                return  # behind a record read past (or not the next number: void either way)
        self._apply(topic, read)

    def _next_number(self, read: PlaybookVersion | PromotionDecision) -> int:
        if isinstance(read, PromotionDecision):
            return self.ledger.next_id(read.playbook_id)
        current = self.latest.get(read.playbook_id)
        return (current.version if current else 0) + 1

    def _apply(self, topic: str, record: Any) -> None:
        if topic == Topic.PLAYBOOK:
            version = record
            current = self.latest.get(version.playbook_id)
            if version.version != (current.version if current else 0) + 1:
                return  # not the next version: a fenced writer's duplicate (docs/protocol.md, "Reading versions")
            self.latest[version.playbook_id] = version
            self.parents.setdefault(version.playbook_id, {})[version.version] = version.parent_version
            if self.history:
                self.covered.update(version.lineage)
            if self.on_version is not None:
                self.on_version(version)
        elif topic == Topic.PROMOTED:
            promotion = record
            if self.ledger.apply(promotion) and self.on_promotion is not None:
                self.on_promotion(promotion)
        elif topic == Topic.REVIEW:
            review = record
            if self.review.apply(review) and self.on_review is not None:
                self.on_review(review.playbook_id)
        elif topic == Topic.CONTROL:
            decision = record
            if self.history:
                self.decisions.append(decision)
            self.batch_sizes[decision.playbook_id] = decision.batch_size
            if self.on_decision is not None:
                self.on_decision(decision)
        elif self.history:
            letter = record
            self.dead_letters.append(letter)
            if letter.trace_id:
                self.covered.add(letter.trace_id)

    def playbook(self, playbook_id: str, agent_id: str | None = None) -> tuple[int, list[PlaybookEntry]]:
        """(version, entries) an agent runs: :meth:`unreviewed`, as agents get it
        (``combee_core.serve.served.served_to_agents``: only the approved entries when the playbook is in review
        mode)."""
        served = self._for_agents(playbook_id, self._served(playbook_id, agent_id))
        return (served.version, list(served.entries)) if served else (0, [])

    def unreviewed(self, playbook_id: str, agent_id: str | None = None) -> tuple[int, list[PlaybookEntry]]:
        """(version, entries) an agent runs (``combee_core.serve.served.served_playbook``): with promotion on, the
        served version, or the candidate in canary for an agent in the canary share; else the newest version seen,
        unless a rollback on ``promoted`` holds it back (then the version it serves); (0, []) before the first."""
        served = self._served(playbook_id, agent_id)
        return (served.version, list(served.entries)) if served else (0, [])

    def served_reviewed(self, playbook_id: str) -> PlaybookVersion | None:
        """:meth:`served` as agents get it: only the approved entries when the playbook is in review mode."""
        return self._for_agents(playbook_id, self.served(playbook_id))

    def reviewed(self, version: PlaybookVersion) -> PlaybookVersion:
        """Any version of the log as agents would get it (``combee serve``'s ``/versions/{v}``)."""
        found = self._for_agents(version.playbook_id, version)
        assert found is not None
        return found

    def _for_agents(self, playbook_id: str, served: PlaybookVersion | None) -> PlaybookVersion | None:
        return served_to_agents(playbook_id, served, review_playbooks=self.settings.review_playbooks,
                                book=self.review)

    def served(self, playbook_id: str) -> PlaybookVersion | None:
        """The version every agent outside a canary runs, as :meth:`playbook` says (None: the empty version 0)."""
        return self._served(playbook_id, None)

    def _served(self, playbook_id: str, agent_id: str | None) -> PlaybookVersion | None:
        return served_playbook(playbook_id, promotion=self.settings.promotion, newest=self.latest.get(playbook_id),
                               parents=self.parents.get(playbook_id, {}), ledger=self.ledger, agent_id=agent_id,
                               candidates=self.candidates)

    def batch_size(self, playbook_id: str) -> int:
        """The playbook's current batch size: the controller's latest decision, else the configured size."""
        return self.batch_sizes.get(playbook_id, self.settings.batch_size)

    def decision_count(self, playbook_id: str) -> int:
        return sum(1 for d in self.decisions if d.playbook_id == playbook_id)

    async def wait_for_decision(self, playbook_id: str, seen: int, grace_s: float) -> bool:
        """Wait up to ``grace_s`` until the playbook has more than ``seen`` decisions; False when none came."""
        try:
            await self.wait_until(lambda: self.decision_count(playbook_id) > seen, grace_s, "a decision")
        except TimeoutError:
            return False
        return True

    async def wait_incorporated(self, trace_ids: set[str], timeout_s: float, what: str) -> None:
        """Wait until every trace id is in a version's lineage or in a dead letter."""
        await self.wait_until(lambda: trace_ids <= self.covered, timeout_s, what)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait until ``condition()`` holds after some record arrived; TimeoutError naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self._task is not None and self._task.done():
                self._task.result()
                raise RuntimeError("the playbook follower stopped")
            if self.check_alive is not None:
                self.check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"waited {timeout_s:.0f}s for {what}")
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
