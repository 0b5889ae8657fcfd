"""The reflector's watch over each playbook's backlog (:mod:`combee_core.control.backlog`): it feeds the monitor what
the stage reads (traces, with the time they were sent; the records still unread on its partitions; the versions of its
live view of ``playbook``), assesses every few seconds, warns in the log when a playbook falls behind, serves the
assessments to ``/metrics``, and, with ``overload_policy=sample``, says which traces to shed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from typing import TYPE_CHECKING

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from combee_core.control.backlog import Backlog, BacklogMonitor, keep_fraction, kept
from combee_core.models import Trace
from combee_core.processors.effects import Count, Effect, Reject

if TYPE_CHECKING:
    from streams.topology.stage_records import Delivery
    from streams.topology.views.host import ConsumerHost

log = logging.getLogger(__name__)

ASSESS_EVERY_S = 2.0
RECENT = 200
WARN_EVERY_S = 30.0
"""A playbook that stays behind is warned about again after this long."""


class BacklogWatch:
    """One per reflector stage."""

    def __init__(self, stage: ConsumerHost) -> None:
        settings = stage.settings
        self.stage = stage
        self.monitor = BacklogMonitor(window_s=settings.backlog_window_s, warn_after_s=settings.backlog_warning_s)
        self.latest: dict[str, Backlog] = {}
        """playbook -> its latest assessment (``/metrics``)."""
        self.shed = 0
        self._failures: dict[str, Counter[bool]] = {}
        self._partition_of: dict[str, set[tuple[str, int]]] = {}
        self._recent: dict[tuple[str, int], deque[str]] = {}
        """Per partition, the playbooks of its last :data:`RECENT` traces read (how its unread records are shared)."""
        self._last_sent: dict[tuple[str, int], float] = {}
        self._warned: dict[str, float] = {}
        self._assessed = 0.0

    def on_version(self, playbook_id: str, lineage: list[str]) -> None:
        self.monitor.settled(playbook_id, lineage, time.time())

    async def tick(self, now: float) -> None:
        """Called by the stage's tick: assess every :data:`ASSESS_EVERY_S` (wall seconds)."""
        if now - self._assessed >= ASSESS_EVERY_S:
            self._assessed = now
            await self.assess(now)

    async def assess(self, now: float) -> None:
        await self._count_unread()
        for playbook_id in self.monitor.playbook_ids():
            backlog = self.monitor.assess(playbook_id, now)
            self.latest[playbook_id] = backlog
            if backlog.falling_behind and now - self._warned.get(playbook_id, -WARN_EVERY_S) >= WARN_EVERY_S:
                self._warned[playbook_id] = now
                policy = ("keeping every trace (overload_policy=keep)" if self.stage.settings.overload_policy ==
                          "keep" else "shedding successes first (overload_policy=sample)")
                log.warning("playbook %s; %s", backlog.describe(), policy)

    async def _count_unread(self) -> None:
        """Records not yet read on each partition, shared among the playbooks of its recent traces by their share."""
        consumer = self.stage.consumer
        if consumer is None:
            return
        for playbook_id, partitions in self._partition_of.items():
            unread, oldest = 0, None
            for topic, partition in partitions:
                tp = TopicPartition(topic, partition)
                if tp not in self.stage.held_by_client():
                    continue
                highwater = consumer.highwater(tp)
                try:
                    position = await asyncio.wait_for(consumer.position(tp), 1.0)
                except (TimeoutError, KafkaError, IllegalStateError):
                    continue
                if highwater is None:
                    continue
                recent = self._recent.get((topic, partition), deque())
                share = recent.count(playbook_id) / len(recent) if recent else 0.0
                unread += round(max(0, highwater - position) * share)
                oldest = self._last_sent.get((topic, partition), oldest)
            self.monitor.unread(playbook_id, unread, oldest)

    def admit(self, deliveries: list[Delivery]) -> tuple[list[Delivery], list[Effect]]:
        """Record each trace read; with ``overload_policy=sample`` and the playbook falling behind, shed some
        (successes first): the deliveries to reflect on, and the dead letters of the shed ones."""
        keep: list[Delivery] = []
        effects: list[Effect] = []
        sample = self.stage.settings.overload_policy == "sample"
        for delivery in deliveries:
            trace: Trace = delivery.value
            record = delivery.record
            sent_at = record.timestamp / 1000 if record.timestamp is not None else time.time()
            self._partition_of.setdefault(trace.playbook_id, set()).add((record.topic, record.partition))
            self._last_sent[(record.topic, record.partition)] = sent_at
            self._recent.setdefault((record.topic, record.partition), deque(maxlen=RECENT)).append(trace.playbook_id)
            failures = self._failures.setdefault(trace.playbook_id, Counter())
            failures[not trace.success] += 1
            backlog = self.latest.get(trace.playbook_id)
            if sample and backlog is not None and backlog.falling_behind:
                share = failures[True] / max(1, sum(failures.values()))
                keep_failures, keep_successes = keep_fraction(backlog, share)
                if not kept(trace.trace_id, keep_failures if not trace.success else keep_successes,
                            self.stage.settings.run_seed):
                    self.shed += 1
                    self.monitor.shed(trace.playbook_id, trace.trace_id)
                    effects += [Reject(record, f"shed: playbook {trace.playbook_id} falls behind (in "
                                       f"{backlog.rate_in:.3g} traces/s, out {backlog.rate_out:.3g} traces/s, "
                                       f"{backlog.lag_traces} waiting); overload_policy=sample keeps failures "
                                       f"first", "Shed", trace_id=trace.trace_id, playbook_id=trace.playbook_id),
                                Count("shed")]
                    continue
            self.monitor.consumed(trace.playbook_id, trace.trace_id, sent_at)
            keep.append(delivery)
        return keep, effects
