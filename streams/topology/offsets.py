"""Which offsets are safe to commit: the lowest offset whose effects are not yet published, per partition."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata


class OffsetTracker:
    """Tracks consumed-but-unfinished offsets so commits never skip a message whose output is not yet sent.

    A stage calls :meth:`consumed` for every record, :meth:`done` once its effects are produced; :meth:`committable`
    gives, per partition, the offset to commit (at-least-once; downstream dedupe makes redelivery harmless).
    """

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, set[int]] = {}
        self._next: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    def consumed(self, tp: TopicPartition, offset: int) -> None:
        self._pending.setdefault(tp, set()).add(offset)
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def done(self, tp: TopicPartition, offset: int) -> None:
        self._pending.get(tp, set()).discard(offset)

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop partitions that were revoked (their uncommitted records will be redelivered elsewhere)."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._next.pop(tp, None)
            self._committed.pop(tp, None)

    def commit_failed(self, partitions: set[TopicPartition]) -> None:
        """Forget that offsets were handed out for commit, so the next call offers them again."""
        for tp in partitions:
            self._committed.pop(tp, None)

    def committable(self, owned: set[TopicPartition] | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Offsets that advanced since the last call and are safe to commit (of ``owned`` partitions only)."""
        result = {}
        for tp, next_offset in self._next.items():
            if owned is not None and tp not in owned:
                continue
            pending = self._pending.get(tp)
            safe = min(pending) if pending else next_offset
            if safe > self._committed.get(tp, -1):
                result[tp] = OffsetAndMetadata(safe, "")
                self._committed[tp] = safe
        return result
