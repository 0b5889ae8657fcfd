"""The latest checkpoint of each of a stage's views (``<stage>/<topic>``, ``<stage>/traces/<partition>``), read from
the ``checkpoints`` topic once per stage start and shared by every view that resumes from one (the promoter has
five), instead of a whole read of the topic per view."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from combee_core.models import ViewCheckpoint
from combee_core.topology import Topic
from streams.topology.topic_reader import read_topic

if TYPE_CHECKING:
    from streams.topology.stage_records import RecordReading


class StartCheckpoints:
    """A stage's checkpoints as they were when its first view asked (a later one is only newer: resuming from an
    older checkpoint reads more, never less)."""

    def __init__(self, stage: RecordReading) -> None:
        self._stage = stage
        self._latest: dict[str, ViewCheckpoint] | None = None
        self._reading = asyncio.Lock()

    async def latest(self, view: str) -> ViewCheckpoint | None:
        """The checkpoint of ``view`` with the highest position (of equal ones, the last written)."""
        return (await self._read()).get(view)

    async def under(self, prefix: str) -> dict[str, ViewCheckpoint]:
        """The latest checkpoint of every view whose name starts with ``prefix``, by the rest of its name."""
        return {view[len(prefix):]: checkpoint for view, checkpoint in (await self._read()).items()
                if view.startswith(prefix)}

    async def _read(self) -> dict[str, ViewCheckpoint]:
        async with self._reading:
            if self._latest is None:
                ctx = self._stage.ctx
                latest: dict[str, ViewCheckpoint] = {}
                for record in await read_topic(ctx.bootstrap, ctx.profile, ctx.settings.topic(Topic.CHECKPOINTS)):
                    checkpoint = self._stage.read_state(record, ViewCheckpoint)
                    if checkpoint is not None and (
                            checkpoint.view not in latest or checkpoint.position >= latest[checkpoint.view].position):
                        latest[checkpoint.view] = checkpoint
                self._latest = latest
            return self._latest
