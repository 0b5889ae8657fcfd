"""Work on several fetches at once, finishing them in fetch order (the reflector's pipeline).

A stage whose work per record is an LLM call used to wait for the slowest call of a fetch before fetching again: a
trace arriving meanwhile waited up to a whole call for the next fetch, then its own call (the last traces of a
stream were reflected up to ~3 s after they were sent, at ~1.2 s per call), and reflections came out in bursts one
fetch apart, which a batch's idle timer could not tell from a pause. :class:`OrderedFetches` starts each fetch's work
at once and finishes each fetch (publish, acknowledge) only after the fetch before it, so what is published keeps the
input order; at most ``limit()`` records are in flight (the consume loop waits for the oldest fetch beyond that).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Spawner(Protocol):
    """What runs a fetch's work: ``Stage.spawn`` (an error in it stops the stage)."""

    def spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]: ...


class OrderedFetches:
    """Fetches in flight, finished in the order they were submitted; at most ``limit()`` records in flight."""

    def __init__(self, stage: Spawner, limit: Callable[[], int], name: str = "fetch") -> None:
        self._stage = stage
        self._limit = limit
        self._name = name
        self._tasks: deque[tuple[asyncio.Task[None], int]] = deque()
        self._in_flight = 0
        self._submitted = 0

    @property
    def in_flight(self) -> int:
        """Records submitted and not finished yet."""
        return self._in_flight

    def room(self) -> int:
        """How many more records may be submitted before :meth:`submit` waits (at least 1)."""
        return max(1, self._limit() - self._in_flight)

    async def submit(self, count: int, work: Awaitable[T], finish: Callable[[T, bool], Awaitable[None]]) -> None:
        """Start ``work`` (the fetch's ``count`` records) now; ``finish`` its result once every fetch submitted before
        it is finished, saying whether it is the latest fetch (none was submitted after it). Returns at once, or
        once the oldest fetches are done when more than ``limit()`` records are in flight."""
        previous = self._tasks[-1][0] if self._tasks else None
        self._in_flight += count
        self._submitted += 1
        number = self._submitted

        async def run() -> None:
            try:
                result = await work
                if previous is not None:
                    await asyncio.wait([previous])  # its errors are its own (they stop the stage)
                await finish(result, number == self._submitted)
            finally:
                self._in_flight -= count

        task = self._stage.spawn(run(), name=f"{self._name}-{self._submitted}")
        self._tasks.append((task, count))
        while self._tasks and self._tasks[0][0].done():
            self._tasks.popleft()
        while self._tasks and self._in_flight > self._limit():
            await asyncio.wait([self._tasks[0][0]])
            while self._tasks and self._tasks[0][0].done():
                self._tasks.popleft()

    async def wait(self) -> None:
        """Until every fetch submitted so far is finished."""
        if self._tasks:
            await asyncio.wait([task for task, _ in self._tasks])
        self._tasks.clear()
