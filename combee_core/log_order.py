"""The reading rule for numbered records in a log: per key, numbers run 0, 1, 2, ... and the first record of each
number wins.

A batch manifest (playbook, batch_id) and a playbook version (playbook, version) are each written by one owner at a
time, but a fenced owner (a "zombie" still finishing work after a rebalance) may write a record for a number that is
already taken, or that it computed from stale state. No transactions are needed to make that harmless: every reader
applies :class:`ContiguousNumbers` to the log in offset order and ignores the records it rejects. Every reader of
the same log therefore agrees on the one content of each number.

The second rule is for the offsets themselves (:class:`OffsetGaps`): a reader that finds a hole in the offsets of a
log it tails reads the hole again until the record in it arrives, for a while. Tansu (0.6) stores a produce in two
steps (``streams.broker.torn_tails`` says so of its ``s3://`` engine; its memory engine shows it too): it advances the
partition's high watermark, then writes the batch, and only then acknowledges. A fetch between the two steps at the
offset being written is answered with the next batch that exists, so a reader at the end of a log that two producers
write at once steps over a record the broker acknowledges a moment later. Measured on the embedded broker: 8 producer
processes of 60 KB records to one partition, a live reader missed 0-3 of 800 records per run
(``tests/integration/test_offset_gaps_on_broker.py``); on the outside-fleet benchmark two aggregators' partials to one
reducer lost 2 of a batch's 54, and that playbook never built another version (issue 44).

:class:`OffsetGaps` says, per partition, which records of a fetch a reader may take: those up to the first hole.
At a hole the reader seeks back to it and fetches again; once the hole has stayed open ``patience_s`` it is taken as
a hole for good (a write torn by a kill, ``streams.broker.torn_tails``, or a record that was never acknowledged) and
the reader reads on, said once per hole. Apache Kafka never shows a reader an offset above what it has stored, so
only readers of Tansu use it. Pure: offsets and the clock are given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
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


GAP_PATIENCE_S = 10.0
"""How long a reader reads a hole again before it reads on. A Tansu write in progress fills its hole within the time
one produce takes (milliseconds idle, seconds at load ~25); a hole still open after this is a write that never
completed."""


@dataclass(frozen=True)
class Admitted:
    """What to do with one partition's fetch: take its first ``take`` records; ``seek_to``: read again from there
    (a hole still waited for); ``gave_up``: the hole (first missing offset, the offset read after it) taken for good
    this time."""

    take: int
    seek_to: int | None = None
    gave_up: tuple[int, int] | None = None
    waited: bool = False
    """The hole was read again until ``patience_s`` ran out (else its next record was old: not a write in
    progress, read on at once)."""


@dataclass
class OffsetGaps(Generic[K]):
    """Per partition, the next offset the reader expects, and since when it has waited at a hole."""

    patience_s: float = GAP_PATIENCE_S
    _next: dict[K, int] = field(default_factory=dict)
    _waiting: dict[K, tuple[int, float]] = field(default_factory=dict)

    def expect(self, key: K, offset: int) -> None:
        """The reader was moved to ``offset`` (a seek): the next record it reads should be there."""
        self._next[key] = offset
        self._waiting.pop(key, None)

    def forget(self, key: K) -> None:
        """The reader's position is not known (a seek to the beginning, a partition taken away or assigned)."""
        self._next.pop(key, None)
        self._waiting.pop(key, None)

    def admit(self, key: K, offsets: Sequence[int], now: float, ages: Sequence[float] | None = None) -> Admitted:
        """The records of one fetch (their offsets, ascending; ``ages``: seconds since each was written, by its
        timestamp) and what to do with them. A hole whose next record was written ``patience_s`` ago or more is not
        a write in progress (records deleted by retention before a stored position, a torn write read later): it is
        read on at once."""
        expected = self._next.get(key)
        for index, offset in enumerate(offsets):
            if expected is not None and offset > expected:
                hole = self._waiting.get(key)
                if hole is None or hole[0] != expected:
                    hole = (expected, now)
                    self._waiting[key] = hole
                age = ages[index] if ages is not None else 0.0
                if max(now - hole[1], age) < self.patience_s:
                    self._next[key] = expected  # the records before the hole are taken
                    return Admitted(take=index, seek_to=expected)
                del self._waiting[key]  # a hole for good: read on, with the rest of this fetch
                self._next[key] = offsets[-1] + 1
                return Admitted(take=len(offsets), gave_up=(expected, offset), waited=age < self.patience_s)
            expected = offset + 1
        if expected is not None:
            self._next[key] = expected
        if offsets:
            self._waiting.pop(key, None)
        return Admitted(take=len(offsets))
