"""Every trace's playbook, version and outcome, read from every partition of ``traces`` outside any group (the
promoter's canary scores, the guard's samples): every replica keeps them, so a new owner decides at once on the same
log. Both read them from their checkpoints (``<stage>/traces/<partition>``, every ``view_checkpoint_every`` traces):
per partition, its first trace of a version at or above its playbook's floor (``traces_resume``): the promoter's
the first a canary verdict can still count (``combee_core.promote.promoter_resume.canary_floor``), the guard's
the oldest version it keeps (``combee_core.guard.processor.Guard.floor``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from aiokafka import TopicPartition

from combee_core.models import ViewCheckpoint, utc_now
from combee_core.promote.promoter_resume import traces_resume
from combee_core.promote.promotion import LiveScore
from combee_core.topology import Topic
from streams.topology.topic_reader import TopicReader
from streams.topology.views.host import ViewHost

log = logging.getLogger(__name__)


def trace_outcome(value: bytes | None, metric: str) -> tuple[str, int, float | None] | None:
    """(playbook, version, the trace's ``metric``) of a trace record; None for what is not a readable trace (the
    reflector's to dead-letter, not counted here) or a metric of the wrong type (``success`` is a bool, ``score`` a
    number); a missing metric is None."""
    try:
        trace = orjson.loads(value or b"")
        playbook_id, version, raw = trace["playbook_id"], trace["playbook_version"], trace.get(metric)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(playbook_id, str) or not isinstance(version, int):
        return None
    if raw is None:
        return playbook_id, version, None
    if isinstance(raw, bool) != (metric == "success") or not isinstance(raw, (int, float)):
        return None
    return playbook_id, version, float(raw)


class LiveTraces:
    """Hands ``take(playbook, version, value)`` every trace's ``metric``, in the order of its partition, until the
    stage stops: from the beginning of ``traces``, or with ``floor`` (playbook -> the lowest version whose traces
    are still needed) from the latest checkpoints."""

    def __init__(self, stage: ViewHost, metric: str, take: Callable[[str, int, float | None], None],
                 floor: Callable[[str], int] | None = None) -> None:
        self._stage = stage
        self._metric = metric
        self._take = take
        self._floor = floor
        self._closed = asyncio.Event()
        self._reader: TopicReader | None = None
        self._next: dict[int, int] = {}
        """Per partition, the offset of the next trace to read."""
        self._first: dict[tuple[int, str, int], int] = {}
        """(partition, playbook, version) -> offset of its first trace read, for the versions still needed."""
        self._unchecked = 0
        self.catch_up_on_assign = False
        """A verdict counts the first traces of the log whenever it is computed: nothing to wait for on assignment."""
        self.applied = 0
        """Trace records read since start (as a ``LogView`` counts its records)."""

    async def start(self) -> None:
        ctx = self._stage.ctx
        topic = ctx.settings.topic(Topic.TRACES)
        self._reader = await TopicReader(ctx.bootstrap, ctx.profile, what=f"{self._stage.name}'s trace reader").start()
        partitions = await self._reader.partitions(topic, refresh=True) or [TopicPartition(topic, 0)]
        if self._floor is not None:
            resumed = await self._stage.checkpoints.under(f"{self._stage.name}/traces/")
            self._next = {int(partition): checkpoint.position for partition, checkpoint in resumed.items()}
        for partition, offset in self._next.items():
            log.info("%s/traces/%d: resumed from its checkpoint at offset %d", self._stage.name, partition, offset)
        await self._reader.assign({tp: self._next.get(tp.partition) for tp in partitions})
        self._stage.spawn(self._follow(), name=f"{self._stage.name}-live-traces", service=True)
        self._stage.views.append(self)

    async def _follow(self) -> None:
        assert self._reader is not None
        try:
            async for records in self._reader.follow(self._closed):
                self.applied += len(records)
                for record in records:
                    self._next[record.partition] = record.offset + 1
                    if (outcome := trace_outcome(record.value, self._metric)) is not None:
                        self._take(*outcome)
                        if self._floor is not None:
                            self._first.setdefault((record.partition, outcome[0], outcome[1]), record.offset)
                self._unchecked += len(records)
                if self._floor is not None and self._unchecked >= self._stage.settings.view_checkpoint_every:
                    await self._checkpoint(self._floor)
        finally:
            await self._reader.stop()

    async def _checkpoint(self, floor: Callable[[str], int]) -> None:
        """Per partition, where a restart reads again: its first trace of a version a verdict can still count."""
        self._unchecked = 0
        self._first = {key: offset for key, offset in self._first.items() if key[2] >= floor(key[1])}
        for partition, position in self._next.items():
            traces = [(offset, pb, v) for (part, pb, v), offset in self._first.items() if part == partition]
            view = f"{self._stage.name}/traces/{partition}"
            checkpoint = ViewCheckpoint(view=view, position=traces_resume(traces, floor, position), nexts={},
                                        written_at=utc_now())
            await self._stage.ctx.send(Topic.CHECKPOINTS, view, checkpoint)

    async def catch_up(self) -> None:
        """Nothing to wait for: a verdict counts the first traces of the log, whenever it is computed."""

    def close(self) -> None:
        self._closed.set()


class LiveScores:
    """With a canary: (playbook_version, score) of every trace, per playbook, in the order of its traces partition
    (with ``floor``: from the checkpoints on, ``LiveTraces``)."""

    def __init__(self, stage: ViewHost, floor: Callable[[str], int] | None = None) -> None:
        self.scores: dict[str, list[LiveScore]] = {}
        self.traces = LiveTraces(stage, "score", self.take, floor)

    async def start(self) -> None:
        await self.traces.start()

    def take(self, playbook_id: str, version: int, score: float | None) -> None:
        self.scores.setdefault(playbook_id, []).append((version, score))
