"""The rule for a record read past (combee_core.serve.late_records) as the pipeline's followers use it besides the
client's (``combee serve``, ``combee tail``, a run's waits: streams.topology.late_reading): a record read again after
a hole is told apart from a new one, so a log whose records are not numbered (dead letters, control decisions)
takes each record once, the late one when it comes; and a hole whose next record is already older than the give-up
time is taken for good at once (an old torn write met by a reader that starts now: no minute's wait at each
start); and ``combee serve``'s follower wired to it (the versions behind a late one count once it comes, each dead
letter is taken once)."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import DeadLetter
from combee_core.serve.late_records import HOLE_GIVE_UP_S, HoleChange, LateRecords
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.testing.playbooks import make_version
from streams.topology.follower import PlaybookFollower
from streams.topology.late_reading import LateReading
from streams.topology.topic_reader import TopicReader

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


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


def _record(topic: str, offset: int, value: bytes) -> Any:
    return SimpleNamespace(topic=topic, partition=0, offset=offset, value=value, timestamp=None)


def test_the_pipelines_follower_counts_the_versions_behind_a_late_one_once_it_comes_and_takes_each_letter_once():
    """``combee serve``'s follower (and a run's) over records as a re-read from a hole delivers them: version 2 and a
    dead letter read past, then read again with the records after them."""
    settings = CombeeSettings.load(env={}, topic_prefix="t.", promotion=False)
    follower = PlaybookFollower(settings, "", BrokerProfile.for_tansu())
    follower._late = LateReading(cast(TopicReader, SimpleNamespace(profile=BrokerProfile.for_tansu())), "test")
    playbook, dlq = settings.topic(Topic.PLAYBOOK), settings.topic(Topic.DLQ)
    versions = {offset: make_version(offset + 1).to_json_bytes() for offset in (0, 1, 2)}
    letters = {offset: DeadLetter(stage="reduce", reason=f"r{offset}", error_type="X", original_size=0,
                                  occurred_at=NOW, trace_id=f"t{offset}").to_json_bytes() for offset in (0, 1, 2)}

    def read(name: Topic, offsets: tuple[int, ...], now: float) -> None:
        topic, values = (playbook, versions) if name == Topic.PLAYBOOK else (dlq, letters)
        for offset in offsets:
            follower._take(name, values[offset], _record(topic, offset, values[offset]), now)

    read(Topic.PLAYBOOK, (0, 2), 0.0)  # version 2, at offset 1, read past
    read(Topic.DLQ, (0, 2), 0.0)
    assert follower.latest["pb"].version == 1 and follower.holes() == ((f"{playbook}[0]", 1), (f"{dlq}[0]", 1))
    read(Topic.PLAYBOOK, (1, 2), 1.0)  # read again from the hole: it came
    read(Topic.DLQ, (1, 2), 1.0)
    assert follower.latest["pb"].version == 3 and follower.holes() == ()
    assert [letter.reason for letter in follower.dead_letters] == ["r0", "r2", "r1"]  # each once, the late one last
