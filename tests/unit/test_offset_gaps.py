"""A reader's rule for holes in a log (combee_core.log_order): a record still being written is read, once, in order;
a hole that stays open, or whose next record is old, is read past."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.log_order import Admitted, OffsetGaps


def test_contiguous_fetches_are_taken_whole():
    gaps: OffsetGaps[str] = OffsetGaps()
    assert gaps.admit("p", [0, 1, 2], now=0.0) == Admitted(take=3)
    assert gaps.admit("p", [3, 4], now=0.0) == Admitted(take=2)


def test_a_hole_is_read_again_until_its_record_arrives():
    gaps: OffsetGaps[str] = OffsetGaps(patience_s=10)
    gaps.admit("p", [0, 1], now=0.0)
    assert gaps.admit("p", [2, 4, 5], now=1.0) == Admitted(take=1, seek_to=3)
    assert gaps.admit("p", [4, 5], now=2.0) == Admitted(take=0, seek_to=3)
    assert gaps.admit("p", [3, 4, 5], now=3.0) == Admitted(take=3)
    assert gaps.admit("p", [6], now=3.0) == Admitted(take=1)


def test_a_hole_still_open_after_the_patience_is_read_past_once():
    gaps: OffsetGaps[str] = OffsetGaps(patience_s=10)
    gaps.admit("p", [0], now=0.0)
    assert gaps.admit("p", [2], now=1.0).seek_to == 1
    assert gaps.admit("p", [2], now=10.5) == Admitted(take=0, seek_to=1)
    assert gaps.admit("p", [2, 3], now=11.0) == Admitted(take=2, gave_up=(1, 2), waited=True)
    assert gaps.admit("p", [4], now=11.0) == Admitted(take=1)


def test_a_hole_before_an_old_record_is_not_a_write_in_progress():
    """Records deleted by retention below a stored position: read on at once, no wait."""
    gaps: OffsetGaps[str] = OffsetGaps(patience_s=10)
    gaps.expect("p", 5)
    assert gaps.admit("p", [40, 41], now=0.0, ages=[3600.0, 3600.0]) == Admitted(take=2, gave_up=(5, 40))


def test_a_position_not_known_takes_what_comes_and_older_records_are_taken():
    gaps: OffsetGaps[str] = OffsetGaps()
    assert gaps.admit("p", [7, 8], now=0.0) == Admitted(take=2)
    gaps.forget("p")
    assert gaps.admit("p", [20], now=0.0) == Admitted(take=1)
    assert gaps.admit("p", [3, 4], now=0.0) == Admitted(take=2)  # a reassignment from an earlier commit


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_tail_reader_reads_every_record_once_in_order(data):
    """A log whose records become readable out of order (concurrent writes): the reader, fetching from its position
    and seeking back at holes, ends with every offset exactly once, in order, and never gives up on a hole that a
    later fetch fills within the patience."""
    size = data.draw(st.integers(1, 40))
    order = data.draw(st.permutations(list(range(size))))
    gaps: OffsetGaps[str] = OffsetGaps(patience_s=1e9)
    gaps.expect("p", 0)  # the reader was put at the log's start
    written: set[int] = set()
    position, read = 0, []
    for offset in [*order, None, None]:
        if offset is not None:
            written.add(offset)
        fetch_size = data.draw(st.integers(1, 8))
        fetched = sorted(o for o in written if o >= position)[:fetch_size]  # the next batches that exist
        admitted = gaps.admit("p", fetched, now=0.0)
        assert admitted.gave_up is None
        read += fetched[:admitted.take]
        if admitted.seek_to is not None:
            position = admitted.seek_to
        elif admitted.take:
            position = fetched[admitted.take - 1] + 1
    while position < size:  # everything written: the reader catches up
        fetched = sorted(o for o in written if o >= position)[:8]
        admitted = gaps.admit("p", fetched, now=0.0)
        read += fetched[:admitted.take]
        position = fetched[admitted.take - 1] + 1
    assert read == list(range(size))
