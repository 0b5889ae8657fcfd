"""What a follower of a numbered log does when it reads past a number it never read (no Kafka).

The ``playbook`` and ``promoted`` logs are read with the reading rule of ``combee_core.log_order``: per playbook, a
record counts only when it carries the next number (version 1, 2, 3, ...; decision 0, 1, 2, ...), the first record
of each number. A record *ahead* of the next number (version 7 while 5 is the last that counted) means the reader
has not read a record that is in the log before it: Tansu shows a record late when several producers write at once
(``combee_core.log_order.OffsetGaps``; the gapless reader waits ``GAP_PATIENCE_S`` for it, then reads on), and the
writers confirm each record counts before writing the next.

The follower then never takes the record ahead, although a version is a whole playbook: it need not be the one that
counts (a fenced writer's record of the same number may follow the first one in the log, and the first one may be
in the part not read), and every other reader (``combee serve``, the stages) keeps to the rule, so the follower would
serve what no other door serves. It never goes back either: a record at or below the last number taken is void.
Nor does it take the missing number from a record after the one ahead: the writers confirm that a record counts
before they write the next number, so the record that counts lies before the one ahead, and a later one is a fenced
writer's repeat. Instead it reads that log again from the offset after the last record of the playbook that
counted: at once, then after growing pauses while the number stays missing (:data:`REREAD_PAUSES_S`), and says so
(:class:`MissingNumbers` returns each gap when it opens and when it closes). Pure: offsets, numbers and the clock are
given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REREAD_PAUSES_S = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds from a gap's opening (then from each re-read) to the next re-read while the gap stays open; the last
repeats. The first is at once: the gapless reader gave up on the hole, so the record may have arrived since."""


@dataclass(frozen=True)
class Gap:
    """A number of ``key`` (a playbook id) on ``log`` that was read past: ``missing`` is the next number the rule
    takes, ``ahead`` the number of the record read instead (at ``offset``); ``reread_from`` the offset after the
    last record of ``key`` that counted (0: none did), where the log is read again."""

    log: str
    key: str
    missing: int
    ahead: int
    offset: int
    reread_from: int
    since: float
    """The clock's time when the gap opened."""


@dataclass(frozen=True)
class GapChange:
    """A gap that opened (``closed`` False) or closed: the missing number was read and counted."""

    gap: Gap
    closed: bool


@dataclass(frozen=True)
class Reading:
    """What to do with one record: ``counts``, take it (the rule's next number, and no record of its playbook was
    read past before it); ``change``, the gap it opened or closed, if any."""

    counts: bool
    change: GapChange | None = None


@dataclass
class MissingNumbers:
    """Per (log, key): the offset after the last record that counted, the gap open and when to read again."""

    pauses_s: tuple[float, ...] = REREAD_PAUSES_S
    _after: dict[tuple[str, str], int] = field(default_factory=dict)
    _gaps: dict[tuple[str, str], Gap] = field(default_factory=dict)
    _rereads: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    """(log, key) -> (re-reads done, clock time the next one is due)"""

    def read(self, log: str, key: str, expected: int, number: int, offset: int, now: float) -> Reading:
        """One record of ``key`` on ``log`` read at ``offset``, numbered ``number``, when the rule's next number is
        ``expected``: whether it counts, and the gap it opens or closes."""
        where = (log, key)
        open_gap = self._gaps.get(where)
        if open_gap is not None and offset > open_gap.offset:  # after the record ahead: void until the gap closes
            return Reading(counts=False)
        if number == expected:
            self._after[where] = offset + 1
            self._rereads.pop(where, None)
            closed = self._gaps.pop(where, None)
            return Reading(True, GapChange(closed, closed=True) if closed is not None else None)
        if number < expected or open_gap is not None:  # void (older, or a number taken), or a gap already open
            return Reading(counts=False)
        gap = Gap(log, key, expected, number, offset, self._after.get(where, 0), now)
        self._gaps[where] = gap
        self._rereads[where] = (0, now + self.pauses_s[0])
        return Reading(False, GapChange(gap, closed=False))

    def due(self, now: float) -> dict[str, int]:
        """Per log, the offset to read it again from now (the lowest of its gaps due); each of those gaps' next
        re-read is set a pause later."""
        seeks: dict[str, int] = {}
        for where, (done, at) in list(self._rereads.items()):
            if now < at:
                continue
            log = where[0]
            seeks[log] = min(seeks.get(log, self._gaps[where].reread_from), self._gaps[where].reread_from)
            self._rereads[where] = (done + 1, now + self.pauses_s[min(done + 1, len(self.pauses_s) - 1)])
        return seeks

    def rereads(self, log: str, key: str) -> int:
        """How many times ``log`` was read again for ``key``'s open gap (0: none open, or not read again yet)."""
        return self._rereads.get((log, key), (0, 0.0))[0]

    def open(self) -> tuple[Gap, ...]:
        """The gaps still open, in the order they opened."""
        return tuple(self._gaps.values())
