"""Owned writes: a stage writes a numbered record only while it owns the record's key, and gives a partition up only
once the write in flight has landed.

A stage decides in its tick after checking that it owns the key; a rebalance can take the partition away while the
decision is being computed or written. Without a fence, the old owner's record can land after the new owner caught
its views up (it then decides the same number again, and the log holds two records of one number). With it:
``owning(key)`` holds the fence across the final ownership check and the write, and the stage's ``on_revoked`` calls
``released()``, which waits for that write, so the revoked partition's fence (``commit_order.fence``) and the next
owner's catch-up come after it. The stage removes a revoked partition from ``assigned`` before ``on_revoked`` runs, so
a write that starts after the release sees it does not own the key.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class WriteFence:
    """One stage's fence between its numbered writes and the release of its partitions."""

    def __init__(self, owns_key: Callable[[str], bool]) -> None:
        self._owns_key = owns_key
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def owning(self, key: str) -> AsyncIterator[bool]:
        """Whether this stage owns ``key`` now; while the block runs, no release of it completes."""
        async with self._lock:
            yield self._owns_key(key)

    async def released(self) -> None:
        """Wait until the write in flight (if any) has finished; call from ``on_revoked``."""
        async with self._lock:
            pass
