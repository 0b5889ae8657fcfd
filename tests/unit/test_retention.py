"""Which stored batches retention deletes: old ones of the growing topics, never the last batch of a partition, never
a record a consumer group has not committed past, and always the oldest first (what remains is contiguous)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from combee_core.retention import StoredBatch, batches_to_delete, retained_topic
from combee_core.topology import TOPICS

DAY = 86400.0


def test_only_the_growing_topics_are_retained_whatever_the_prefix():
    for prefix in ("", "combee.", "team-a_", "x-"):
        kept = {spec.name for spec in TOPICS if retained_topic(prefix + spec.name)}
        assert kept == {"traces", "llm-calls", "dlq"}
    assert not any(retained_topic(f"combee.{spec.name}") for spec in TOPICS if spec.state)


def test_old_batches_below_every_commit_go_and_the_last_one_stays():
    batches = [StoredBatch(offset, 100, written_at=0.0) for offset in range(0, 10, 2)]  # 0 2 4 6 8
    assert batches_to_delete(batches, now=8 * DAY, max_age_s=7 * DAY) == batches[:-1]
    assert batches_to_delete(batches, now=8 * DAY, max_age_s=7 * DAY, committed=[6, 9]) == batches[:3]  # 0 2 4
    assert batches_to_delete(batches, now=8 * DAY, max_age_s=7 * DAY, committed=[5]) == batches[:2]  # 4-5 unread
    assert batches_to_delete(batches, now=6 * DAY, max_age_s=7 * DAY) == []
    assert batches_to_delete(batches[:1], now=8 * DAY, max_age_s=0) == []


@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 10)), min_size=0, max_size=30),
       st.floats(0, 12), st.lists(st.integers(0, 400), max_size=3))
def test_what_goes_is_an_old_fully_read_prefix_and_never_the_end(steps, max_age, committed):
    offset, batches = 0, []
    for step, written in steps:
        batches.append(StoredBatch(offset, 10, written))
        offset += step
    now = 10.0
    doomed = batches_to_delete(list(reversed(batches)), now, max_age, committed)
    assert doomed == batches[:len(doomed)]  # the oldest first, in offset order: the rest is contiguous
    assert len(doomed) < max(len(batches), 1)
    for index, batch in enumerate(doomed):
        assert now - batch.written_at >= max_age
        if committed:
            assert batches[index + 1].base_offset <= min(committed)
