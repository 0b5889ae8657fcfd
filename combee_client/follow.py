"""Following the served version of one playbook in the background: the ``playbook`` and ``promoted`` topics (and in
review mode, ``COMBEE_REVIEW_PLAYBOOKS``, the ``review`` topic) read from their beginning (no consumer group), with
their reading rules and the served-version rule of every follower (``combee_core.serve.served``: in review mode only
the reviewed entries, as ``combee serve`` serves them); a broker that is away is retried with backoff while the last
served version stays. With ancestors (``COMBEE_PLAYBOOK_PARENTS``), each ancestor's served version is followed too,
for the composed view.

On Tansu the topics are read with the project's gapless consumer (``streams.broker.gapless_consumer``: a record Tansu
is still writing is waited for, not stepped over). A record read past all the same (one that arrived later than the
consumer waits) is a hole: the records of a playbook behind it do not count until it is read, and the topic is read
again from it until it is, or for at most a minute (``combee_core.serve.late_records``); said in warnings and in
``FollowState.holes``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from combee_core.connection import KafkaConnection
from combee_core.models import PlaybookVersion, PromotionDecision, ReviewDecision
from combee_core.serve.late_records import HoleChange, LateRecords
from combee_core.serve.review import review_on
from combee_core.serve.scoped_serving import Chain
from combee_core.serve.served import ServedLog
from combee_core.serve.serving import etag
from combee_core.topology import Topic
from streams.broker.connection import client_kwargs
from streams.broker.gapless_consumer import GaplessConsumer
from streams.broker.profile import BrokerProfile, profile_for

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 100
"""A fetch with nothing new returns after this: Tansu holds a fetch for its whole wait even when a record arrives
(docs/broker.md), so this bounds how late a new version is seen; Kafka answers as soon as one arrives."""
RETRY_S = (0.5, 1.0, 2.0, 5.0)
"""Waits between attempts to reach the broker (the last one repeats)."""
_MODELS: dict[str, type[PlaybookVersion] | type[PromotionDecision] | type[ReviewDecision]] = {
    Topic.PLAYBOOK: PlaybookVersion, Topic.PROMOTED: PromotionDecision, Topic.REVIEW: ReviewDecision}


class FollowState:
    """What the follower saw: written by the follower's thread, read by the agent's. The served version and where it
    came from change together (one tuple, assigned at once), so a reader never pairs one with the other's."""

    def __init__(self, served: PlaybookVersion | None = None, source: str = "empty",
                 inherited: Chain = ()) -> None:
        self.current: tuple[PlaybookVersion | None, str, Chain] = (served, source, tuple(inherited))
        """The served version, where it came from, and each ancestor's served version (nearest first)."""
        self.caught_up = False
        """The log was read to its end at least once since the follower (re)connected, with no hole open then (a
        restart never serves, on the way, a version older than the log's because a record was read past)."""
        self.seen_at: float | None = None
        """``time.monotonic()`` when the served version last changed from the log."""
        self.errors = 0
        self.last_error = ""
        self.holes: tuple[tuple[str, int], ...] = ()
        """(topic, offset) of the records read past and not read yet: the served version is what the topics say
        without the records behind them, and the topic is read again until they are read (or given up)."""

    @property
    def served(self) -> PlaybookVersion | None:
        """The served version (None: the empty version 0)."""
        return self.current[0]

    @property
    def source(self) -> str:
        """``empty`` (nothing yet), ``cache`` (the cache file, not yet confirmed by the log) or ``log``."""
        return self.current[1]

    @property
    def inherited(self) -> Chain:
        """Each ancestor and its served version, nearest first (none: the playbook has no parent)."""
        return self.current[2]

    def __repr__(self) -> str:
        version = self.served.version if self.served is not None else 0
        return (f"FollowState(version={version}, source={self.source}, caught_up={self.caught_up}, "
                f"errors={self.errors}, last_error={self.last_error!r}, holes={len(self.holes)})")


@dataclass
class ServedFollower:
    """Follows ``playbook_id``'s served version on ``topic_prefix``'s topics, updating ``state``; ``on_served`` is
    called (in the follower's thread) with each new served version from the log."""

    playbook_id: str
    topic_prefix: str
    promotion: bool
    agent_id: str
    bootstrap: str
    connection: KafkaConnection
    state: FollowState = field(default_factory=FollowState)
    on_served: Callable[[PlaybookVersion | None], None] | None = None
    """Called with the served version whenever it or an ancestor's changed (``state`` is already updated)."""
    log_state: ServedLog = field(default_factory=ServedLog)
    ancestors: tuple[str, ...] = ()
    """The playbook's ancestors, nearest first (``combee_core.serve.scopes.scope_chain`` without the playbook)."""
    review_playbooks: str = ""
    """``COMBEE_REVIEW_PLAYBOOKS``: the playbooks whose agents get only reviewed entries."""
    broker_kind: Literal["auto", "kafka", "tansu"] = "auto"
    """``COMBEE_BROKER_KIND``: on Tansu the topics are read with the gapless consumer (auto: asked at each
    connection)."""
    late: LateRecords = field(default_factory=LateRecords)

    def __post_init__(self) -> None:
        self.log_state = self._fresh_log()

    def _fresh_log(self) -> ServedLog:
        return ServedLog(review_playbooks=self.review_playbooks)

    def reviewing(self) -> bool:
        """Whether the playbook or an ancestor is in review mode (then the ``review`` topic is followed too)."""
        return any(review_on(self.review_playbooks, scope) for scope in self.scopes())

    def topics(self) -> tuple[str, ...]:
        followed = (Topic.PLAYBOOK, Topic.PROMOTED, *((Topic.REVIEW,) if self.reviewing() else ()))
        return tuple(f"{self.topic_prefix}{topic}" for topic in followed)

    async def run(self) -> None:
        """Follow until cancelled; reconnect with backoff whenever the consumer cannot start or the follow fails."""
        attempt = 0
        while True:
            profile = await profile_for(self.bootstrap, self.broker_kind, self.connection)
            consumer = self._consumer(profile)
            try:
                await consumer.start()
                attempt = 0
                await self._follow(consumer, holes=profile.kind == "tansu")
            except (KafkaError, OSError) as error:
                self._failed(error)
            except Exception as error:  # a bug must not end the follow silently: said with its frames, then retried
                log.exception("combee client: following %s%s failed unexpectedly", self.topic_prefix, self.playbook_id)
                self._failed(error)
            finally:
                await consumer.stop()
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    def _consumer(self, profile: BrokerProfile) -> AIOKafkaConsumer:
        """On Tansu the gapless consumer (docs/broker.md); on Apache Kafka aiokafka's own (it never shows an offset
        above what it stored)."""
        settings: dict[str, Any] = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                                    "fetch_max_wait_ms": FETCH_MAX_WAIT_MS}
        if profile.kind == "tansu":
            return GaplessConsumer(**client_kwargs(self.bootstrap, self.connection), **settings)
        return AIOKafkaConsumer(**client_kwargs(self.bootstrap, self.connection), **settings)

    def _failed(self, error: BaseException) -> None:
        self.state.errors += 1
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        if message != self.state.last_error:
            log.warning("combee client: cannot follow %s%s (%s); serving version %d from %s meanwhile",
                        self.topic_prefix, self.playbook_id, message, self._version(), self.state.source)
        self.state.last_error = message

    def _version(self) -> int:
        return self.state.served.version if self.state.served is not None else 0

    async def _follow(self, consumer: AIOKafkaConsumer, holes: bool = True) -> None:
        """Read the topics from their beginning; ``holes``: keep the offsets read past (Tansu; Apache Kafka never
        shows an offset above what it stored, and a hole there is a transaction marker, not a record)."""
        self.log_state = self._fresh_log()  # read from the beginning again: a fresh consumer starts at offset 0
        self.late = LateRecords()
        self.state.caught_up, self.state.holes = False, ()
        await self._wait_for_topics(consumer)
        tps = [TopicPartition(topic, 0) for topic in self.topics()]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp, offset in (await consumer.beginning_offsets(tps)).items() if holes else ():
            self.late.moved(tp.topic.removeprefix(self.topic_prefix), offset)  # a hole at the very first fetch too
        while True:
            batch = await consumer.getmany(timeout_ms=FETCH_MAX_WAIT_MS * 2)
            now = time.monotonic()
            for tp, records in batch.items():
                for record in records:
                    self._take(tp.topic.removeprefix(self.topic_prefix), record.value,
                               record.offset if holes else None, now, _age_s(record.timestamp))
            for topic, offset in self._rereads(now).items():
                consumer.seek(TopicPartition(f"{self.topic_prefix}{topic}", 0), offset)
                self.late.moved(topic, offset)
            ends = [consumer.highwater(tp) for tp in tps]
            if not self.state.caught_up and not self.state.holes and await _at_ends(consumer, tps, ends):
                self.state.caught_up = True
                log.info("combee client: read %s%s to its end; served version %d", self.topic_prefix,
                         self.playbook_id, self._served_from_log()[0])
            if self.state.caught_up:
                self._publish()

    async def _wait_for_topics(self, consumer: AIOKafkaConsumer) -> None:
        """Until the broker knows both topics (a client may start before the pipeline creates them): a partition
        assigned before its topic exists is never fetched once it does."""
        said = False
        while True:
            await consumer._client.force_metadata_update()
            missing = [topic for topic in self.topics() if not consumer.partitions_for_topic(topic)]
            if not missing:
                return
            if not said:
                log.info("combee client: waiting for %s to exist; serving version %d from %s meanwhile",
                         " and ".join(missing), self._version(), self.state.source)
                said = True
            await asyncio.sleep(RETRY_S[1])

    def _take(self, topic: str, value: bytes | None, offset: int | None = None, now: float = 0.0,
              age_s: float = 0.0) -> None:
        """One record of ``topic`` (its name without the prefix: ``playbook``, ``promoted`` or ``review``), read at
        ``offset`` (None: not known, no hole is looked for) at ``now`` (``time.monotonic()``), written ``age_s`` ago."""
        if offset is not None:
            self._hole_changed(self.late.passed(topic, offset, now, age_s))
        record = self._record(topic, value)
        if isinstance(record, ReviewDecision):
            self.log_state.take_review(record)
            return
        if record is None:
            return
        if offset is not None:
            if isinstance(record, PlaybookVersion):
                newest = self.log_state.latest.get(record.playbook_id)
                expected, number = (newest.version if newest else 0) + 1, record.version
            else:
                expected, number = self.log_state.ledger.next_id(record.playbook_id), record.decision_id
            if not self.late.read(topic, record.playbook_id, expected, number, offset, now):
                return
        if isinstance(record, PlaybookVersion):
            self.log_state.take_version(record)
        else:
            self.log_state.take_decision(record)

    def _record(self, topic: str, value: bytes | None) -> PlaybookVersion | PromotionDecision | ReviewDecision | None:
        """The record, when it is valid and of the playbook or an ancestor."""
        model = _MODELS.get(topic, ReviewDecision)
        try:
            record = model.from_json_bytes(value)
        except ValueError as error:  # not ours to dead-letter: the pipeline's readers skip it too
            log.warning("combee client: skipping a record that is not a valid %s: %s", model.__name__,
                        str(error).splitlines()[0])
            return None
        return record if record.playbook_id in self.scopes() else None

    def _hole_changed(self, change: HoleChange | None) -> None:
        if change is None:
            return
        where = f"{self.topic_prefix}{change.log}"
        offsets = f"offset {change.first}" if change.first == change.last else f"offsets {change.first}-{change.last}"
        if change.what == "filled":
            log.info("combee client: read %s of %s (it had been read past)", offsets, where)
        elif change.what == "opened":
            log.warning("combee client: %s of %s read past (a record written later than the consumer waits): the "
                        "records of a playbook behind it do not count until it is read; reading %s again from it "
                        "(for at most %.0f s)", offsets, where, where, self.late.give_up_s)
        else:
            log.warning("combee client: %s of %s still not there after %.0f s: read past for good (a write that "
                        "never completed), as every reader does", offsets, where, self.late.give_up_s)
        self.state.holes = self.late.holes()

    def _rereads(self, now: float) -> dict[str, int]:
        """The topics to read again now (a hole open or just given up), and from which offset."""
        seeks, given_up = self.late.due(now)
        for change in given_up:
            self._hole_changed(change)
        return seeks

    def scopes(self) -> tuple[str, ...]:
        return (self.playbook_id, *self.ancestors)

    def _says(self, playbook_id: str) -> bool:
        return playbook_id in self.log_state.latest or playbook_id in self.log_state.ledger.latest

    def _served_from_log(self) -> tuple[int, PlaybookVersion | None, bool]:
        """(version, served, whether the log says anything about this playbook or an ancestor)."""
        served = self.log_state.served(self.playbook_id, promotion=self.promotion, agent_id=self.agent_id)
        return (served.version if served else 0), served, any(self._says(scope) for scope in self.scopes())

    def _publish(self) -> None:
        _, _, says = self._served_from_log()
        if not says and (self.state.served is not None or any(v is not None for _, v in self.state.inherited)):
            return  # a log without this playbook (a broker back without its data) does not undo a served version
        served = self._kept(self.playbook_id, self.state.served)
        before = dict(self.state.inherited)
        inherited = tuple((scope, self._kept(scope, before.get(scope))) for scope in self.ancestors)
        if self.state.source == "log" and etag(served) == etag(self.state.served) and (
                [etag(v) for _, v in inherited] == [etag(v) for _, v in self.state.inherited]):
            return
        self.state.current, self.state.seen_at = (served, "log", inherited), time.monotonic()
        if self.on_served is not None:
            self.on_served(served)

    def _kept(self, scope: str, current: PlaybookVersion | None) -> PlaybookVersion | None:
        """``scope``'s served version from the log; the one held when the log says nothing about it."""
        if current is not None and not self._says(scope):
            return current
        return self.log_state.served(scope, promotion=self.promotion, agent_id=self.agent_id)


def _age_s(timestamp_ms: int | None) -> float:
    """Seconds since a record was written, by its timestamp (0: none)."""
    return max(0.0, time.time() - timestamp_ms / 1000) if timestamp_ms is not None else 0.0


async def _at_ends(consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: list[int | None]) -> bool:
    """Every partition read to the high watermark its last fetch reported (right on Tansu too, docs/broker.md)."""
    for tp, end in zip(tps, ends):
        if end is None or await consumer.position(tp) < end:
            return False
    return True
