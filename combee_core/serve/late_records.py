"""What a reader of a numbered log does about a record it read past (no Kafka): the one rule for the client's
follower (``combee_client.follow``), the pipeline's followers (``combee serve``, ``combee tail``, a run's waits:
``streams.topology.late_reading``) and the stages' views (``streams.topology.views.log_view``, which hold the whole
log at a hole, not only the playbook behind it).

The ``playbook`` and ``promoted`` logs are read with the reading rule of ``combee_core.log_order``: per playbook, a
record counts only when it carries the next number (version 1, 2, 3, ...; decision 0, 1, 2, ...), the first record
of each number in offset order. Tansu can show a record late when several producers write at once: a fetch steps
over it (``combee_core.log_order.OffsetGaps``). The gapless consumer waits ``GAP_PATIENCE_S`` for it, then reads on.
A follower that applied the rule to what it happened to read would then either stop for good (the next version is
ahead of the rule: 7 while 5 is the last that counted, and 6 is never read) or take a record that does not count (a
fenced writer's repeat of 6, read while the first 6 was stepped over).

So every offset read past is a *hole*, kept until it is read: a record of a playbook counts only when its number is
the next one and no hole lies between the playbook's last record that counted and it. The served version stays
what the rule says without the records behind a hole (never a record ahead, although a version is a whole
playbook: it need not be the one that counts, and ``combee serve`` and the stages keep to the rule too), and the log
is read again from its first hole: at once, then after growing pauses (:data:`REREAD_PAUSES_S`). A hole still open
after :data:`HOLE_GIVE_UP_S` is a write that never completed (a torn write, ``streams.broker.torn_tails``): it is
taken as a hole for good, as every reader of the project takes it, and the log is read again past it; so is a hole
whose next record was written that long ago already (an old torn write met by a reader that starts now: no minute's
wait at each start). A record at or below the last number taken is void: the follower never goes back. A reader of
a log whose records are not numbered (dead letters, control decisions) takes each record once
(:meth:`LateRecords.seen_before` says which are read again). Pure: offsets, numbers and the clock are given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

REREAD_PAUSES_S = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0)
"""Seconds from a log's first hole (then from each re-read) to the next re-read while a hole stays open; the last
repeats. The first is at once: the gapless consumer has already waited for the record."""
HOLE_GIVE_UP_S = 60.0
"""A hole still open this long after it was seen is taken as a hole for good (with the gapless consumer's own wait,
70 s after the record's neighbours were written: a produce at load ~25 takes seconds)."""
LARGEST_HOLE = 1024
"""A jump over more offsets than this is not a write in progress (records removed before the reader's position):
read on, as the gapless consumer reads on past a hole whose next record is old."""


@dataclass(frozen=True)
class HoleChange:
    """Offsets ``first`` .. ``last`` of ``log`` that were read past (``opened``), read at last (``filled``) or taken
    as holes for good (``given_up``)."""

    log: str
    first: int
    last: int
    what: Literal["opened", "filled", "given_up"]


@dataclass
class LateRecords:
    """Per log, the next offset the reader expects, the holes and when to read again; per (log, key), the offset
    after the key's last record that counted."""

    pauses_s: tuple[float, ...] = REREAD_PAUSES_S
    give_up_s: float = HOLE_GIVE_UP_S
    _next: dict[str, int] = field(default_factory=dict)
    _holes: dict[str, dict[int, float]] = field(default_factory=dict)
    """log -> offset -> clock time it was first read past"""
    _for_good: dict[str, set[int]] = field(default_factory=dict)
    _rereads: dict[str, tuple[int, float]] = field(default_factory=dict)
    """log -> (re-reads done, clock time the next one is due)"""
    _after: dict[tuple[str, str], int] = field(default_factory=dict)
    _high: dict[str, int] = field(default_factory=dict)
    """log -> the offset after the highest record read"""

    def moved(self, log: str, offset: int) -> None:
        """The reader of ``log`` was moved to ``offset`` (a seek): the next record read should be there."""
        self._next[log] = offset

    def seen_before(self, log: str, offset: int) -> bool:
        """Whether the record at ``offset`` was read before (a re-read from a hole reads the records after it again);
        ask before :meth:`passed`. A hole's record is new when it comes."""
        return offset < self._high.get(log, 0) and offset not in self._holes.get(log, {})

    def passed(self, log: str, offset: int, now: float, age_s: float = 0.0) -> HoleChange | None:
        """A record of ``log`` read at ``offset`` (every record, whatever its playbook or validity), written
        ``age_s`` ago (by its timestamp); the holes it shows (offsets read past) or fills. Holes behind a record
        written ``give_up_s`` ago or more are taken for good at once (a write in progress is younger than the
        record after it)."""
        expected, holes = self._next.get(log), self._holes.setdefault(log, {})
        self._next[log] = offset + 1
        self._high[log] = max(self._high.get(log, 0), offset + 1)
        if offset in holes:
            del holes[offset]
            if not holes:
                self._rereads.pop(log, None)
            return HoleChange(log, offset, offset, "filled")
        if expected is None or not 0 < offset - expected <= LARGEST_HOLE:
            return None
        new = [o for o in range(expected, offset) if o not in holes and o not in self._for_good.get(log, ())]
        if not new:
            return None
        if age_s >= self.give_up_s:
            self._for_good.setdefault(log, set()).update(new)
            return HoleChange(log, new[0], new[-1], "given_up")
        holes.update(dict.fromkeys(new, now))
        self._rereads.setdefault(log, (0, now + self.pauses_s[0]))
        return HoleChange(log, new[0], new[-1], "opened")

    def read(self, log: str, key: str, expected: int, number: int, offset: int, now: float) -> bool:
        """A record of ``key`` on ``log`` (after :meth:`passed` for it), numbered ``number``, when the rule's next
        number is ``expected``: whether it counts (take it)."""
        after = self._after.get((log, key), 0)
        if number != expected or any(after <= hole < offset for hole in self._holes.get(log, {})):
            return False
        self._after[(log, key)] = offset + 1
        return True

    def due(self, now: float) -> tuple[dict[str, int], list[HoleChange]]:
        """Per log, the offset to read it again from now (its first hole, or a hole just given up); and the holes
        given up now. Each re-read's next one is set a pause later. The caller moves its reader (:meth:`moved`)."""
        seeks: dict[str, int] = {}
        given_up: list[HoleChange] = []
        for log, holes in self._holes.items():
            old = sorted(o for o, since in holes.items() if now - since >= self.give_up_s)
            if old:
                for o in old:
                    del holes[o]
                self._for_good.setdefault(log, set()).update(old)
                given_up.append(HoleChange(log, old[0], old[-1], "given_up"))
                seeks[log] = old[0]
            done, at = self._rereads.get(log, (0, now))
            if holes and now >= at:
                seeks[log] = min(seeks.get(log, min(holes)), min(holes))
                self._rereads[log] = (done + 1, now + self.pauses_s[min(done + 1, len(self.pauses_s) - 1)])
            elif not holes:
                self._rereads.pop(log, None)
        return seeks, given_up

    def holes(self) -> tuple[tuple[str, int], ...]:
        """(log, offset) of every hole still open."""
        return tuple((log, offset) for log, holes in self._holes.items() for offset in sorted(holes))
