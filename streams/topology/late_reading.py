"""A reader of the pipeline's logs that never steps over a record written late for good: ``combee serve``'s
follower (``streams.topology.follower``), ``combee tail`` (``streams.topology.tail_follow``) and the stages' views
(``streams.topology.views.log_view``, which apply nothing after a hole until it is read).

On Tansu a record can become readable below offsets already read (docs/broker.md): the gapless consumer waits for
it ``GAP_PATIENCE_S``, then reads on. :class:`LateReading` binds the rule for what then
(``combee_core.serve.late_records``, the one the client's follower uses) to a :class:`TopicReader`: every offset read
past is a hole, the records of a playbook behind it do not count until it is read (:meth:`LateReading.counts`), the
partition is read again from it at once, then after growing pauses (:meth:`LateReading.reread`), for at most a minute;
a record read again is told apart from a new one (:meth:`LateReading.new`) so an unnumbered log's records are taken
once. On Apache Kafka nothing is a hole (it never shows an offset above what it stored; a gap there is a transaction
marker): every record is new and the rule alone decides.
"""

from __future__ import annotations

import logging
import time

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.serve.late_records import HoleChange, LateRecords
from streams.topology.topic_reader import TopicReader

__all__ = ["LateReading"]

log = logging.getLogger(__name__)


def _log_name(tp: TopicPartition) -> str:
    return f"{tp.topic}[{tp.partition}]"


class LateReading:
    """Holes of the partitions a :class:`TopicReader` follows (``what`` names the reader in its log lines)."""

    def __init__(self, reader: TopicReader, what: str, late: LateRecords | None = None) -> None:
        self.reader = reader
        self.what = what
        self.on = reader.profile.kind == "tansu"
        """Only on Tansu (Apache Kafka never shows a record late)."""
        self.late = late if late is not None else LateRecords()
        self._tps: dict[str, TopicPartition] = {}

    async def started(self, starts: dict[TopicPartition, int | None]) -> None:
        """The reader was assigned these partitions at these offsets (None: the beginning); a hole at the very first
        fetch is seen too."""
        if not self.on:
            return
        for tp in starts:
            self._tps[_log_name(tp)] = tp
        beginning = [tp for tp, offset in starts.items() if offset is None]
        firsts = await self.reader.beginning_offsets(beginning) if beginning else {}
        for tp, offset in starts.items():
            self.late.moved(_log_name(tp), offset if offset is not None else firsts.get(tp, 0))

    def new(self, record: ConsumerRecord, now: float) -> bool:
        """Call once per record read, in order: whether it was not read before (a re-read from a hole reads the
        records after the hole again; a late record is new when it comes)."""
        if not self.on:
            return True
        name = _log_name(TopicPartition(record.topic, record.partition))
        again = self.late.seen_before(name, record.offset)
        age_s = max(0.0, time.time() - record.timestamp / 1000) if record.timestamp is not None else 0.0
        self._said(self.late.passed(name, record.offset, now, age_s))
        return not again

    def counts(self, record: ConsumerRecord, key: str, expected: int, number: int, counts: bool, now: float) -> bool:
        """A numbered record (after :meth:`new` for it): ``key``'s record numbered ``number`` when the rule's next is
        ``expected``; ``counts``: what the rule alone says. It counts when no hole lies between the key's last record
        that counted and it."""
        if not self.on:
            return counts
        name = _log_name(TopicPartition(record.topic, record.partition))
        return self.late.read(name, key, expected, number, record.offset, now) and counts

    def reread(self, now: float) -> None:
        """Move the reader back to each partition's first hole when a re-read is due (call after each fetch)."""
        if not self.on:
            return
        seeks, given_up = self.late.due(now)
        for change in given_up:
            self._said(change)
        for name, offset in seeks.items():
            self.reader.seek(self._tps[name], offset)
            self.late.moved(name, offset)

    def holes(self) -> tuple[tuple[str, int], ...]:
        """("topic[partition]", offset) of every hole still open."""
        return self.late.holes()

    def _said(self, change: HoleChange | None) -> None:
        if change is None:
            return
        where = f"offset {change.first}" if change.first == change.last else f"offsets {change.first}-{change.last}"
        if change.what == "filled":
            log.info("%s: read %s of %s (it had been read past)", self.what, where, change.log)
        elif change.what == "opened":
            log.warning("%s: %s of %s read past (a record written later than the consumer waits): the records of a "
                        "playbook behind it do not count until it is read; reading %s again from it (for at most "
                        "%.0f s)", self.what, where, change.log, change.log, self.late.give_up_s)
        else:
            log.warning("%s: %s of %s not there %.0f s after the records behind it were written: read past for good "
                        "(a write that never completed), as every reader does", self.what, where, change.log,
                        self.late.give_up_s)
