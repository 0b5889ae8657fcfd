"""The batcher's memory of batched trace ids: a resend within the horizon is dropped, not batched twice."""

from __future__ import annotations

from collections import deque

DEFAULT_DEDUPE_HORIZON = 1_000_000
"""Batched trace ids remembered per playbook to drop resends (about 200 bytes each with their trace digests, see
docs/benchmarks.md)."""


class RecentTraceIds:
    """The trace ids of one playbook that a resend must not bring in again: a bounded horizon.

    Ids of the open batch are always held. Ids of closed batches count against ``horizon``; past it the oldest are
    forgotten, in batch order, so a trace resent after ``horizon`` newer traces were batched is batched again.
    Live batching and a restore from the same manifests forget the same ids (restart-equivalent).
    """

    def __init__(self, horizon: int = DEFAULT_DEDUPE_HORIZON) -> None:
        if horizon < 1:
            raise ValueError(f"dedupe horizon must be at least 1 trace, got {horizon}")
        self.horizon = horizon
        self.forgotten = 0
        self._open: dict[str, str | None] = {}
        self._batched: dict[str, str | None] = {}
        """trace id -> digest of the trace batched under it (None when the reflection did not carry one)"""
        self._order: deque[str] = deque()

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._open or trace_id in self._batched

    def __len__(self) -> int:
        return len(self._open) + len(self._batched)

    def digest_of(self, trace_id: str) -> str | None:
        """Digest of the trace held or batched under ``trace_id`` (None if unknown)."""
        return self._open.get(trace_id) or self._batched.get(trace_id)

    def hold(self, trace_id: str, digest: str | None = None) -> None:
        """A trace joined the open batch."""
        self._open[trace_id] = digest

    def release_open(self) -> None:
        """Forget the open batch's ids (its reflections will be delivered again)."""
        self._open.clear()

    def batched(self, trace_ids: list[str], digests: list[str | None] | None = None) -> None:
        """These traces are in a closed (or restored) batch; forget the oldest beyond the horizon."""
        for trace_id, digest in zip(trace_ids, digests or [None] * len(trace_ids)):
            digest = self._open.pop(trace_id, None) or digest
            if trace_id not in self._batched:
                self._batched[trace_id] = digest
                self._order.append(trace_id)
        while len(self._order) > self.horizon:
            self._batched.pop(self._order.popleft(), None)
            self.forgotten += 1
