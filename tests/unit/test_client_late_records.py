"""The client's follower and a record it read past (a hole in the offsets, as Tansu shows a record written late):
the records of a playbook behind the hole do not count until it is read (never the version ahead, never a fenced
writer's repeat, never an older one), it says so, and reads the topic again from the hole until it is read or given
up (combee_core.serve.late_records)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime, timezone
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_client.follow import FollowState, ServedFollower
from combee_core.connection import PLAINTEXT
from combee_core.log_order import ContiguousNumbers
from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.promote.promotion import PromotionLedger, PromotionRule, operator_decision
from combee_core.serve.late_records import HOLE_GIVE_UP_S, REREAD_PAUSES_S, HoleChange, LateRecords
from combee_core.topology import Topic

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _version(n: int, text: str = "", playbook_id: str = "pb") -> PlaybookVersion:
    entry = PlaybookEntry(entry_id="e0", section="tools", content=text or f"rule {n}", created_version=1,
                          updated_version=n)
    return PlaybookVersion(playbook_id=playbook_id, version=n, parent_version=n - 1, batch_id=n - 1, entries=[entry],
                           next_entry_number=2, operations=[], lineage=[f"t{n}"],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=f"{n:064x}", published_at=NOW)


def _follower(promotion: bool = False) -> tuple[ServedFollower, list]:
    seen: list = []
    follower = ServedFollower("pb", "t.", promotion, "agent", "localhost:1", PLAINTEXT, FollowState(), seen.append)
    return follower, seen


# ------------------------------------------------------------------------------------------------ the pure decision

def _read(late: LateRecords, offset: int, expected: int, number: int, now: float = 0.0, key: str = "pb") -> bool:
    late.passed("playbook", offset, now)
    return late.read("playbook", key, expected, number, offset, now)


def test_records_behind_a_hole_do_not_count_until_it_is_read_and_it_is_read_again_at_once_then_after_pauses():
    late = LateRecords()
    assert _read(late, 0, expected=1, number=1)
    assert late.passed("playbook", 3, 10.0) == HoleChange("playbook", 1, 2, "opened")  # offsets 1 and 2 read past
    assert not late.read("playbook", "pb", 2, 2, 3, 10.0)  # the next number, but a repeat may be all it is
    assert not _read(late, 4, expected=2, number=3, now=10.0)
    assert late.due(10.0) == ({"playbook": 1}, [])
    assert late.due(10.0 + REREAD_PAUSES_S[1] - 0.1) == ({}, [])
    assert late.due(10.0 + REREAD_PAUSES_S[1]) == ({"playbook": 1}, [])
    late.moved("playbook", 1)
    assert late.passed("playbook", 1, 12.0) == HoleChange("playbook", 1, 1, "filled")
    assert late.read("playbook", "pb", 2, 2, 1, 12.0)  # the first version 2
    assert late.passed("playbook", 2, 12.0) == HoleChange("playbook", 2, 2, "filled")
    assert not _read(late, 3, expected=3, number=2, now=12.0)  # the repeat
    assert _read(late, 4, expected=3, number=3, now=12.0)
    assert late.holes() == () and late.due(1e9) == ({}, [])


def test_a_hole_still_open_after_the_give_up_time_is_read_past_for_good_and_the_records_behind_it_count():
    late = LateRecords()
    _read(late, 0, expected=1, number=1)
    assert not _read(late, 2, expected=2, number=2, now=0.0)  # offset 1: a write that never completed
    assert late.due(HOLE_GIVE_UP_S - 0.1)[0] == {"playbook": 1}
    late.moved("playbook", 1)
    assert not _read(late, 2, expected=2, number=2, now=HOLE_GIVE_UP_S - 0.1)
    assert late.due(HOLE_GIVE_UP_S) == ({"playbook": 1}, [HoleChange("playbook", 1, 1, "given_up")])
    late.moved("playbook", 1)
    assert _read(late, 2, expected=2, number=2, now=HOLE_GIVE_UP_S) and late.holes() == ()


def test_a_hole_before_a_playbooks_last_counted_record_does_not_hold_its_next_one():
    late = LateRecords()
    _read(late, 0, expected=1, number=1, key="a")
    assert not _read(late, 2, expected=1, number=1, key="b")  # offset 1 read past: b's version 1 may be in it
    assert _read(late, 3, expected=2, number=2, key="a") is False  # a's too: the hole may hold a's version 2
    late.moved("playbook", 1)
    late.passed("playbook", 1, 0.1)  # it held another playbook's record
    assert _read(late, 2, expected=1, number=1, key="b") and _read(late, 3, expected=2, number=2, key="a")


def test_a_version_ahead_read_without_a_hole_is_void_as_the_rule_says_and_opens_nothing():
    late = LateRecords()
    _read(late, 0, expected=1, number=1)
    assert not _read(late, 1, expected=2, number=3) and late.holes() == ()
    assert _read(late, 2, expected=2, number=2)


def test_the_pauses_stop_growing_at_the_last_one_and_a_far_jump_is_not_a_hole():
    late = LateRecords(pauses_s=(0.0, 3.0), give_up_s=1e9)
    late.passed("promoted", 0, 0.0)
    late.passed("promoted", 2, 0.0)
    assert [t for t in range(0, 20) if late.due(float(t))[0]] == [0, 3, 6, 9, 12, 15, 18]
    other = LateRecords()
    other.passed("playbook", 0, 0.0)
    assert other.passed("playbook", 5000, 0.0) is None and other.holes() == ()


@st.composite
def _logs_read_with_holes(draw):
    """A playbook log in log order (the writers' versions 1, 2, ... with fenced writers' repeats of numbers already
    written among them), the offsets a reader steps over the first time it passes them (written late) and the
    offsets never written (torn writes)."""
    log, newest = [], 0
    for _ in range(draw(st.integers(1, 30))):
        if newest and draw(st.booleans()):
            log.append(draw(st.integers(max(1, newest - 2), newest)))
        else:
            newest += 1
            log.append(newest)
    offsets = st.integers(0, len(log) - 1)
    return log, draw(st.sets(offsets)), draw(st.sets(offsets, max_size=2))


@settings(max_examples=300, deadline=None)
@given(_logs_read_with_holes())
def test_a_follower_that_reads_again_where_it_is_told_ends_where_the_rule_on_the_log_does_and_never_goes_back(case):
    log, late_offsets, torn = case
    late, late_offsets, newest, served, position, now, taken = LateRecords(), set(late_offsets), 0, [], 0, 0.0, []
    late.moved("playbook", 0)  # the reader starts at the log's beginning
    while now < 3 * HOLE_GIVE_UP_S:
        shown = [o for o in range(position, len(log)) if o not in late_offsets and o not in torn]
        for offset in shown:  # a fetch steps over the late records before the last one it shows
            late.passed("playbook", offset, now)
            if late.read("playbook", "pb", newest + 1, log[offset], offset, now):
                newest += 1
                taken.append(offset)
            served.append(newest)
        position = shown[-1] + 1 if shown else position
        late_offsets.clear()  # written by now: there for every later fetch
        now += 2.0
        seek = late.due(now)[0].get("playbook")
        if seek is not None:
            late.moved("playbook", seek)
            position = seek
        elif not late.holes() and position == len(log):
            break
    written = [(offset, n) for offset, n in enumerate(log) if offset not in torn]
    rule = ContiguousNumbers[str](start=1)  # the reading rule (valid_versions) on what the log holds
    assert taken == [offset for offset, n in written if rule.accept("pb", n)]
    assert served == sorted(served) and late.holes() == ()


# ------------------------------------------------------------------------------------------------ the binding

def test_the_follower_does_not_serve_a_version_ahead_of_a_hole_says_so_and_serves_it_once_the_hole_is_read():
    follower, seen = _follower()
    v1, v2, v3 = _version(1), _version(2), _version(3)
    follower._take(Topic.PLAYBOOK, v1.to_json_bytes(), 0, 0.0)
    follower._take(Topic.PLAYBOOK, v3.to_json_bytes(), 2, 0.0)  # version 2, at offset 1, was stepped over
    follower._publish()
    assert follower.state.served == v1 and follower.state.holes == ((Topic.PLAYBOOK, 1),)
    assert follower._rereads(0.0) == {Topic.PLAYBOOK: 1}
    follower.late.moved(Topic.PLAYBOOK, 1)
    for offset, version in ((1, v2), (2, v3)):
        follower._take(Topic.PLAYBOOK, version.to_json_bytes(), offset, 0.1)
    follower._publish()
    assert follower.state.served == v3 and follower.state.holes == () and seen == [v1, v3]


def test_a_hole_behind_a_version_written_a_minute_ago_is_read_past_at_once_and_that_version_served():
    """An old torn write met at a start (the record after the hole was written HOLE_GIVE_UP_S ago): no minute's
    wait, as the pipeline's readers (streams.topology.late_reading)."""
    follower, _ = _follower()
    follower._take(Topic.PLAYBOOK, _version(1).to_json_bytes(), 0, 0.0)
    follower._take(Topic.PLAYBOOK, _version(2).to_json_bytes(), 2, 0.0, HOLE_GIVE_UP_S)  # offset 1: never written
    follower._publish()
    assert follower.state.served == _version(2) and follower.state.holes == ()


def test_a_fenced_writers_repeat_read_after_a_hole_is_not_served_the_first_version_of_that_number_is():
    follower, seen = _follower()
    v1, v2, zombie = _version(1), _version(2), _version(2, "a fenced writer's version 2")
    follower._take(Topic.PLAYBOOK, v1.to_json_bytes(), 0, 0.0)
    follower._take(Topic.PLAYBOOK, zombie.to_json_bytes(), 2, 0.0)  # v2, at offset 1, was stepped over
    follower._publish()
    assert follower.state.served == v1 and follower._rereads(0.0) == {Topic.PLAYBOOK: 1}
    follower.late.moved(Topic.PLAYBOOK, 1)
    for offset, version in ((1, v2), (2, zombie)):
        follower._take(Topic.PLAYBOOK, version.to_json_bytes(), offset, 0.1)
    follower._publish()
    assert follower.state.served == v2 and seen == [v1, v2] and follower.state.holes == ()


def test_a_repeated_or_older_version_is_never_served():
    follower, seen = _follower()
    v1, v2 = _version(1), _version(2)
    records = [v1, v2, _version(2, "a fenced writer's version 2"), _version(1, "an old version 1 again")]
    for offset, version in enumerate(records):
        follower._take(Topic.PLAYBOOK, version.to_json_bytes(), offset, 0.0)
    follower._publish()
    assert follower.state.served == v2 and seen == [v2] and follower.state.holes == ()


def test_a_promotion_decision_read_past_holds_the_pointer_it_had_until_that_decision_is_read():
    follower, _ = _follower(promotion=True)
    v1, v2, v3 = _version(1), _version(2), _version(3)
    ledger = PromotionLedger()
    decisions = []
    for version in (v1, v2, v3):
        decision = operator_decision(ledger, "operator-promote", version, playbook_id="pb", by="op", why="",
                                     rule=PromotionRule(), now=NOW)
        ledger.apply(decision)
        decisions.append(decision.to_json_bytes())
    follower._take(Topic.PROMOTED, decisions[0], 0, 0.0)
    follower._take(Topic.PROMOTED, decisions[2], 2, 0.0)
    follower._publish()
    assert follower.state.served == v1 and follower.state.holes == ((Topic.PROMOTED, 1),)
    assert follower._rereads(0.0) == {Topic.PROMOTED: 1}
    follower.late.moved(Topic.PROMOTED, 1)
    follower._take(Topic.PROMOTED, decisions[1], 1, 0.1)
    follower._take(Topic.PROMOTED, decisions[2], 2, 0.1)
    follower._publish()
    assert follower.state.served == v3 and follower.state.holes == ()


class _LateRecordsLog:
    """In memory, what the follower's consumer sees of Tansu while several producers write: each offset in ``late``
    is missing from the first ``n`` fetches that pass it (a write in progress), and there for every later fetch."""

    def __init__(self, topics: dict[str, list[bytes]], late: dict[tuple[str, int], int]) -> None:
        self.records, self.late, self.at = topics, dict(late), {}
        self._client = SimpleNamespace(force_metadata_update=self._nothing)

    async def _nothing(self) -> None:
        return None

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0} if topic in self.records else None

    def assign(self, tps) -> None:
        self.at = {tp: 0 for tp in tps}

    async def beginning_offsets(self, tps) -> dict:
        return dict.fromkeys(tps, 0)

    async def seek_to_beginning(self, *tps) -> None:
        self.at.update({tp: 0 for tp in tps})

    def seek(self, tp, offset: int) -> None:
        self.at[tp] = offset

    async def getmany(self, timeout_ms: int = 0) -> dict:
        await asyncio.sleep(0.001)
        fetched = {}
        for tp, at in self.at.items():
            records = self.records[tp.topic]
            shown = [SimpleNamespace(offset=offset, value=records[offset], timestamp=None)
                     for offset in range(at, len(records)) if not self.late.get((tp.topic, offset))]
            for offset in range(at, len(records)):
                if self.late.get((tp.topic, offset)):
                    self.late[(tp.topic, offset)] -= 1
            self.at[tp] = len(records)
            if shown:
                fetched[tp] = shown
        return fetched

    def highwater(self, tp) -> int:
        return len(self.records[tp.topic])

    async def position(self, tp) -> int:
        return self.at[tp]


async def test_a_version_written_late_is_read_again_and_the_newest_served_where_before_the_one_before_stayed():
    follower, seen = _follower()
    consumer = _LateRecordsLog({"t.playbook": [_version(n).to_json_bytes() for n in (1, 2, 3)], "t.promoted": []},
                               late={("t.playbook", 1): 1})
    task = asyncio.create_task(follower._follow(consumer))  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 5.0
        while (follower.state.served is None or follower.state.served.version < 3) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [v.version for v in seen] == [3] and follower.state.holes == ()  # not version 1 on the way


async def test_a_client_started_with_a_cached_version_serves_no_older_one_from_a_log_read_with_a_hole():
    cached = _version(3)
    follower = ServedFollower("pb", "t.", False, "agent", "localhost:1", PLAINTEXT,
                              FollowState(served=cached, source="cache"), None)
    consumer = _LateRecordsLog({"t.playbook": [_version(n).to_json_bytes() for n in (1, 2, 3)], "t.promoted": []},
                               late={("t.playbook", 1): 2})  # still missing when read again at once
    served: list[int] = []
    follower.on_served = lambda version: served.append(version.version if version else 0)
    task = asyncio.create_task(follower._follow(consumer))  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 5.0
        while follower.state.source != "log" and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert served == [3] and follower.state.served == cached
