"""The rule for a record read past (combee_core.serve.late_records) as the pipeline's followers use it besides the
client's (``combee serve``, ``combee tail``, a run's waits: streams.topology.late_reading): a record read again after
a hole is told apart from a new one, so a log whose records are not numbered (dead letters, control decisions)
takes each record once, the late one when it comes; and a hole whose next record is already older than the give-up
time is taken for good at once (an old torn write met by a reader that starts now: no minute's wait at each
start)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.serve.late_records import HOLE_GIVE_UP_S, HoleChange, LateRecords


def test_a_re_read_from_a_hole_reads_the_records_after_it_again_and_only_the_late_one_is_new():
    late = LateRecords()
    taken = []
    for offset in (0, 2, 3):  # offset 1 read past
        if not late.seen_before("dlq", offset):
            taken.append(offset)
        late.passed("dlq", offset, 0.0)
    assert late.due(0.0)[0] == {"dlq": 1}
    late.moved("dlq", 1)
    for offset in (1, 2, 3, 4):  # the late record came; 4 is new
        if not late.seen_before("dlq", offset):
            taken.append(offset)
        late.passed("dlq", offset, 0.5)
    assert taken == [0, 2, 3, 1, 4] and late.holes() == ()


def test_a_hole_behind_a_record_older_than_the_give_up_time_is_read_past_for_good_at_once():
    late = LateRecords()
    late.passed("playbook", 0, 0.0)
    assert late.passed("playbook", 2, 0.0, age_s=HOLE_GIVE_UP_S) == HoleChange("playbook", 1, 1, "given_up")
    assert late.holes() == () and late.due(0.0) == ({}, [])
    assert late.read("playbook", "pb", 2, 2, 2, 0.0)  # the version behind it counts at once
    late.passed("playbook", 4, 0.0, age_s=HOLE_GIVE_UP_S - 1)  # a young one is waited for
    assert late.holes() == (("playbook", 3),)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1)))))
def test_a_reader_that_reads_again_where_it_is_told_takes_every_record_exactly_once(case):
    """Records at the ``late`` offsets are stepped over the first time (as Tansu does: only with a record after them
    to answer with); whatever the re-reads, each record of the log is new exactly once."""
    size, late_offsets = case
    late, taken, now, position, passed_once = LateRecords(), [], 0.0, 0, set()
    late.moved("log", 0)
    for _ in range(10 * size + 10):
        while position < size:
            stepped_over = late_offsets - passed_once
            if position in stepped_over and any(o not in stepped_over for o in range(position, size)):
                passed_once.add(position)
                position += 1
                continue
            if not late.seen_before("log", position):
                taken.append(position)
            late.passed("log", position, now)
            position += 1
        seeks, _ = late.due(now)
        if "log" in seeks:
            position = seeks["log"]
            late.moved("log", position)
        elif not late.holes():
            break
        now += 1.0
    assert sorted(taken) == list(range(size)) and len(taken) == size
