"""The reading rule for numbered records in a log: per key, numbers run 0, 1, 2, ... and the first record of each
number wins.

A batch manifest (playbook, batch_id) and a playbook version (playbook, version) are each written by one owner at a
time, but a fenced owner (a "zombie" still finishing work after a rebalance) may write a record for a number that is
already taken, or that it computed from stale state. No transactions are needed to make that harmless: every reader
applies :class:`ContiguousNumbers` to the log in offset order and ignores the records it rejects. Every reader of
the same log therefore agrees on the one content of each number.
"""

from __future__ import annotations

from collections import deque
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

    def why_void(self, key: K, number: int) -> str:
        """Why a record numbered ``number`` did not count, read after the log reached it: its number was taken
        (by another record first), or the log has not reached it (the numbers before it are missing)."""
        expected = self.next(key)
        if number >= expected:
            return f"out of order: the log's next number is {expected}"
        return "another record took the number first"

    def load(self, nexts: dict[K, int]) -> None:
        """Resume from a checkpoint: these keys' next numbers (others start over)."""
        self._next = dict(nexts)

    def state(self) -> dict[K, int]:
        return dict(self._next)

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


class ResumePoints:
    """Per key, the offsets of the valid records a rebuild still needs, oldest first: where a view of the log can
    resume reading, and the number gates it must resume with, instead of reading from offset 0."""

    def __init__(self) -> None:
        self._points: dict[str, deque[tuple[int, int, int]]] = {}
        """key -> (offset, number, weight) of the records still needed"""
        self._weight: dict[str, int] = {}

    def add(self, key: str, offset: int, number: int, weight: int = 1) -> None:
        self._points.setdefault(key, deque()).append((offset, number, weight))
        self._weight[key] = self._weight.get(key, 0) + weight

    def drop_below(self, key: str, number: int) -> None:
        """Records of ``key`` numbered below ``number`` are no longer needed."""
        points = self._points.get(key)
        while points and points[0][1] < number:
            self._weight[key] -= points.popleft()[2]

    def keep_newest(self, key: str, weight: int, at_least: int = 1) -> None:
        """Keep only the newest records of ``key`` whose weights add up to ``weight`` (and ``at_least`` of them)."""
        points = self._points.get(key)
        while points and len(points) > at_least and self._weight[key] - points[0][2] >= weight:
            self._weight[key] -= points.popleft()[2]

    def resume(self, position: int, nexts: dict[str, int]) -> tuple[int, dict[str, int]]:
        """(offset to resume from, gates there): the oldest needed record, or ``position`` when none is needed.

        A key with needed records resumes at its oldest one's number; a key without keeps its current gate, so its
        records between the resume offset and ``position`` are read again as void (not needed)."""
        needed = {key: points[0] for key, points in self._points.items() if points}
        resume = min((offset for offset, _, _ in needed.values()), default=position)
        gates = dict(nexts)
        gates.update({key: number for key, (_, number, _) in needed.items()})
        return resume, gates
