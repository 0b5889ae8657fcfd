"""The served version of every playbook, kept in memory from the topics (``combee serve``'s one reader).

A :class:`~streams.topology.follower.PlaybookFollower` reads the playbook, control, ``promoted`` and dead-letter
topics from their beginning and says which version is served (``PlaybookFollower.served``); each version it counts
and each decision it applies re-reads the playbook's served version into a
:class:`~combee_core.serve.serving.ServedTable`, and a change wakes every :class:`Listener` (long-polls, event streams,
the MCP notifier) for it and for every playbook that has it as an ancestor (``COMBEE_PLAYBOOK_PARENTS``: their
composed view changed too). A listener holds the *ids* of the playbooks that changed since it last looked, never
versions, so a slow one costs a set the size of the playbooks, and then reads the current served version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from combee_core.models import PlaybookVersion, PromotionDecision
from combee_core.serve.late_records import HOLE_GIVE_UP_S
from combee_core.serve.review import review_on
from combee_core.serve.scoped_serving import Chain, affected, chain_etag
from combee_core.serve.scopes import parse_parents, scope_chain
from combee_core.serve.serving import PlaybookSummary, ServedTable, summarize
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.follower import PlaybookFollower
from streams.topology.topic_reader import TopicReader

log = logging.getLogger(__name__)

CATCH_UP_TIMEOUT_S = 120.0
"""Longest ``combee serve`` reads the topics' existing records before answering (then it fails, one line). It
answers once they are read to their end, a record read past and still missing included (on Tansu, a write in
progress or torn: ``streams.topology.late_reading``): each playbook is then served the last version before the hole,
never one behind it, and the versions behind it are served in order once it is read (or given up after
``HOLE_GIVE_UP_S``); :meth:`ServedPlaybooks.pending` names the holes meanwhile (``/healthz``). Before, a start waited
for every hole, up to a minute after a torn write."""


@dataclass(eq=False)
class Listener:
    """The playbooks whose served version changed since :meth:`next` last returned."""

    pending: set[str] = field(default_factory=set)
    _woken: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, playbook_id: str) -> None:
        self.pending.add(playbook_id)
        self._woken.set()

    async def next(self, timeout_s: float | None = None) -> set[str]:
        """The changed playbook ids (empty when ``timeout_s`` passed first)."""
        if not self.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout_s)
        changed, self.pending = self.pending, set()
        self._woken.clear()
        return changed


class ServedPlaybooks:
    """``async with ServedPlaybooks(settings, bootstrap, profile) as served``: the topics read up to their end, then
    followed; :meth:`served` is a playbook's served version now."""

    def __init__(self, settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, *,
                 catch_up_timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
        self.settings = settings
        self.table = ServedTable(keep=settings.serve_keep_versions)
        self.parents = parse_parents(settings.playbook_parents)
        self.token_budget: int | None = settings.playbook_budget_tokens
        """The budget of a composed view (a playbook with a parent): the one a version is held within."""
        self.follower = PlaybookFollower(settings, bootstrap, profile, on_version=self._on_version,
                                         on_promotion=self._on_promotion, on_review=self._refresh,
                                         history=False)
        self._bootstrap, self._profile = bootstrap, profile
        self._catch_up_timeout_s = catch_up_timeout_s
        self._listeners: set[Listener] = set()

    async def __aenter__(self) -> ServedPlaybooks:
        followed = [Topic.PLAYBOOK, Topic.PROMOTED, *([Topic.REVIEW] if self.settings.review_playbooks else [])]
        ends = await topic_ends(self._bootstrap, self._profile, [self.settings.topic(t) for t in followed])
        await self.follower.__aenter__()
        try:
            await self.follower.wait_until(
                lambda: all(self.follower.read_to.get(tp, 0) >= end for tp, end in ends.items()),
                self._catch_up_timeout_s, f"the {', '.join(followed)} topics to be read to their end")
        except BaseException:
            await self.follower.__aexit__(None, None, None)
            raise
        for where, offset in self.pending():
            log.warning("%s: offset %d is not there yet (a write in progress, or torn by a kill): serving the versions "
                        "before it; those behind it are served once it is read (or given up, within %.0f s)", where,
                        offset, HOLE_GIVE_UP_S)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.follower.__aexit__(*exc)

    def pending(self) -> tuple[tuple[str, int], ...]:
        """("topic[partition]", offset) of each record read past and still missing: the versions behind it are not
        served yet (empty on Apache Kafka, and on Tansu once every record is read or given up)."""
        return self.follower.holes()

    def served(self, playbook_id: str) -> PlaybookVersion | None:
        """The served version (None: none yet, the empty version 0)."""
        return self.table.served.get(playbook_id)

    def version(self, playbook_id: str, number: int) -> PlaybookVersion | None:
        """A version kept (``GET .../versions/{v}``), as agents would get it (only reviewed entries in review mode);
        None when never seen, ``VersionNotKept`` when dropped as too old."""
        found = self.table.version(playbook_id, number)
        return self.follower.reviewed(found) if found is not None else None

    def under_review(self, playbook_id: str) -> bool:
        """Whether the playbook's agents get only reviewed entries (``COMBEE_REVIEW_PLAYBOOKS``)."""
        return review_on(self.settings.review_playbooks, playbook_id)

    def chain(self, playbook_id: str) -> Chain:
        """The playbook then its ancestors, nearest first, each with its served version (one: no parent)."""
        return [(scope, self.served(scope)) for scope in scope_chain(playbook_id, self.parents)]

    def composed(self, playbook_id: str) -> bool:
        """Whether the playbook has a parent (its agents are served the composed view)."""
        return playbook_id in self.parents

    def etag(self, playbook_id: str) -> str:
        """The entity tag of what the playbook's agents are served (:func:`combee_core.serve.scoped_serving.chain_etag`:
        its served version's tag without a parent)."""
        return chain_etag(self.chain(playbook_id), self.token_budget)

    def _seen(self, playbook_id: str) -> bool:
        return playbook_id in self.table.served or playbook_id in self.table.versions

    def known(self, playbook_id: str) -> bool:
        """Seen on the playbook topic, or a child some scope of whose chain was."""
        return self._seen(playbook_id) or (self.composed(playbook_id) and any(
            self._seen(scope) for scope in scope_chain(playbook_id, self.parents)))

    def summary(self, playbook_id: str) -> PlaybookSummary:
        """The playbook's line in ``GET /playbooks``: its own versions, its parent and the tag of what it is served."""
        return summarize(self.table, playbook_id).model_copy(
            update={"parent": self.parents.get(playbook_id), "etag": self.etag(playbook_id)})

    def playbook_ids(self) -> list[str]:
        """The known playbooks: those seen, and the children with a scope seen."""
        return sorted({*self.table.playbook_ids(), *(child for child in self.parents if self.known(child))})

    @contextlib.contextmanager
    def listen(self) -> Iterator[Listener]:
        listener = Listener()
        self._listeners.add(listener)
        try:
            yield listener
        finally:
            self._listeners.discard(listener)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after a served version changed, up to ``timeout_s``; its last value."""
        deadline = time.monotonic() + timeout_s
        with self.listen() as listener:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.check_following()
                await listener.next(min(remaining, 1.0))
        return True

    def check_following(self) -> None:
        """Raise the follower's error when it stopped (a lost broker, an unreadable record)."""
        task = self.follower._task
        if task is not None and task.done():
            task.result()
            raise RuntimeError("the playbook follower stopped")

    def _on_version(self, version: PlaybookVersion) -> None:
        self.table.record(version)
        self._refresh(version.playbook_id)

    def _on_promotion(self, decision: PromotionDecision) -> None:
        self._refresh(decision.playbook_id)

    def _refresh(self, playbook_id: str) -> None:
        served = self.follower.served_reviewed(playbook_id)
        if self.table.update(playbook_id, served):
            log.info("%s: serving v%d", playbook_id, served.version if served else 0)
            for changed in affected(playbook_id, self.parents, self.table.playbook_ids()):
                for listener in list(self._listeners):
                    listener.push(changed)


async def topic_ends(bootstrap: str, profile: BrokerProfile, topics: list[str]) -> dict[TopicPartition, int]:
    """The end offset of partition 0 of each single-partition topic that exists (a missing one is left out)."""
    async with TopicReader(bootstrap, profile, what="combee serve's end probe") as reader:
        existing = await reader.topics()
        return await reader.end_offsets([TopicPartition(topic, 0) for topic in topics if topic in existing])
