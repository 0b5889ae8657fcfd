"""Every trace's playbook, version and outcome, read from the beginning of every partition of ``traces`` outside any
group (the promoter's canary scores, the guard's samples): every replica keeps them, so a new owner decides at once
on the same log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
from aiokafka import TopicPartition

from combee_core.promote.promotion import LiveScore
from combee_core.topology import Topic
from streams.topology.runtime import Stage
from streams.topology.topic_reader import TopicReader


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
    """Hands ``take(playbook, version, value)`` every trace's ``metric``, in the order of its partition, from the
    beginning of ``traces``, until the stage stops."""

    def __init__(self, stage: Stage, metric: str, take: Callable[[str, int, float | None], None]) -> None:
        self._stage = stage
        self._metric = metric
        self._take = take
        self._closed = asyncio.Event()
        self._reader: TopicReader | None = None
        self.applied = 0
        """Trace records read since start (as a ``LogView`` counts its records)."""

    async def start(self) -> None:
        ctx = self._stage.ctx
        topic = ctx.settings.topic(Topic.TRACES)
        self._reader = await TopicReader(ctx.bootstrap, ctx.profile, what=f"{self._stage.name}'s trace reader").start()
        await self._reader.assign(await self._reader.partitions(topic, refresh=True) or [TopicPartition(topic, 0)])
        self._stage.spawn(self._follow(), name=f"{self._stage.name}-live-traces", service=True)
        self._stage.views.append(self)

    async def _follow(self) -> None:
        assert self._reader is not None
        try:
            async for records in self._reader.follow(self._closed):
                self.applied += len(records)
                for record in records:
                    if (outcome := trace_outcome(record.value, self._metric)) is not None:
                        self._take(*outcome)
        finally:
            await self._reader.stop()

    async def catch_up(self) -> None:
        """Nothing to wait for: a verdict counts the first traces of the log, whenever it is computed."""

    def close(self) -> None:
        self._closed.set()


class LiveScores:
    """With a canary: (playbook_version, score) of every trace, per playbook, in the order of its traces partition."""

    def __init__(self, stage: Stage) -> None:
        self.scores: dict[str, list[LiveScore]] = {}
        self.traces = LiveTraces(stage, "score", self.take)

    async def start(self) -> None:
        await self.traces.start()

    def take(self, playbook_id: str, version: int, score: float | None) -> None:
        self.scores.setdefault(playbook_id, []).append((version, score))
