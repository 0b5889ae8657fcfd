"""One background task per key (a playbook) that works through what is ready for it, one thing after the other: a
kick starts it unless it runs; a revocation cancels the tasks of the keys that left (their records stay
uncommitted, so the next owner redoes the work)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from streams.topology.runtime import cancel_tasks

if TYPE_CHECKING:
    from streams.topology.runtime import Stage


class KeyTasks:
    """``work(key)`` run by ``stage`` in the background (``Stage.spawn``: an unexpected error stops the stage), at
    most one task per key."""

    def __init__(self, stage: Stage, work: Callable[[str], Awaitable[None]], name: str) -> None:
        self.stage = stage
        self.work = work
        self.name = name
        self._tasks: dict[str, asyncio.Task] = {}

    def keys(self) -> set[str]:
        return set(self._tasks)

    def kick(self, key: str) -> None:
        """Start the key's task unless it is running (a running one finds the new work itself)."""
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = self.stage.spawn(self.work(key), name=f"{self.name}-{key}")

    async def cancel(self, keys: Iterable[str]) -> None:
        await cancel_tasks([self._tasks.pop(key) for key in keys if key in self._tasks])
