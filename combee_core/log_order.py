"""The reading rule for numbered records in a log: per key, numbers run 0, 1, 2, ... and the first record of each
number wins.

A batch manifest (playbook, batch_id) and a playbook version (playbook, version) are each written by one owner at a
time, but a fenced owner (a "zombie" still finishing work after a rebalance) may write a record for a number that is
already taken, or that it computed from stale state. No transactions are needed to make that harmless: every reader
applies :class:`ContiguousNumbers` to the log in offset order and ignores the records it rejects. Every reader of
the same log therefore agrees on the one content of each number.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from combee_core.models import BatchManifest, PlaybookVersion

K = TypeVar("K", bound=Hashable)


class ContiguousNumbers(Generic[K]):
    """Per key, accepts the numbers ``start, start+1, ...`` once each, in log order; everything else is void."""

    def __init__(self, start: int = 0) -> None:
        self._start = start
        self._next: dict[K, int] = {}

    def next(self, key: K) -> int:
        """The number the next valid record of ``key`` must carry."""
        return self._next.get(key, self._start)

    def accept(self, key: K, number: int) -> bool:
        """True when ``number`` is the next one of ``key`` (the record is valid, and the number is taken)."""
        if number != self.next(key):
            return False
        self._next[key] = number + 1
        return True

    def forget(self, key: K) -> None:
        self._next.pop(key, None)

    def keys(self) -> list[K]:
        return list(self._next)


def valid_versions(versions: Iterable[PlaybookVersion]) -> list[PlaybookVersion]:
    """The versions that count, in log order: per playbook 1, 2, 3, ..., the first record of each number."""
    gate = ContiguousNumbers[str](start=1)
    return [v for v in versions if gate.accept(v.playbook_id, v.version)]


def valid_manifests(manifests: Iterable[BatchManifest]) -> list[BatchManifest]:
    """The batches that count, in log order: per playbook 0, 1, 2, ..., the first manifest of each batch id."""
    gate = ContiguousNumbers[str]()
    return [m for m in manifests if gate.accept(m.playbook_id, m.batch_id)]
