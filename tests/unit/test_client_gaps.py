"""The client's follower and a version (or promotion decision) it read past: it keeps serving what the reading rule
says (never the record ahead, never an older or repeated one), says so, and reads that log again from the last
record that counted until the missing one is read (combee_core.serve.missing_numbers)."""

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
from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.promote.promotion import PromotionLedger, PromotionRule, operator_decision
from combee_core.serve.missing_numbers import REREAD_PAUSES_S, MissingNumbers, Reading
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

def test_a_record_ahead_of_the_next_number_opens_a_gap_read_again_at_once_then_after_growing_pauses():
    gaps = MissingNumbers()
    assert gaps.read("playbook", "pb", expected=1, number=1, offset=4, now=0.0) == Reading(counts=True)
    ahead = gaps.read("playbook", "pb", expected=2, number=3, offset=9, now=10.0)
    assert not ahead.counts and ahead.change is not None and not ahead.change.closed
    assert (ahead.change.gap.missing, ahead.change.gap.ahead, ahead.change.gap.offset,
            ahead.change.gap.reread_from) == (2, 3, 9, 5)
    assert gaps.read("playbook", "pb", expected=2, number=4, offset=10, now=10.0) == Reading(counts=False)
    assert gaps.due(10.0) == {"playbook": 5}
    assert gaps.due(10.0 + REREAD_PAUSES_S[1] - 0.1) == {}
    assert gaps.due(10.0 + REREAD_PAUSES_S[1]) == {"playbook": 5}
    assert gaps.rereads("playbook", "pb") == 2
    found = gaps.read("playbook", "pb", expected=2, number=2, offset=7, now=12.0)  # read again, before the one ahead
    assert found.counts and found.change is not None and found.change.closed and found.change.gap.missing == 2
    assert gaps.open() == () and gaps.due(1e9) == {}


def test_the_missing_number_after_the_record_ahead_is_a_fenced_writers_repeat_and_does_not_count():
    gaps = MissingNumbers()
    gaps.read("playbook", "pb", expected=1, number=2, offset=1, now=0.0)  # version 1, at offset 0, read past
    assert gaps.read("playbook", "pb", expected=1, number=1, offset=3, now=0.0) == Reading(counts=False)
    assert [gap.missing for gap in gaps.open()] == [1] and gaps.due(0.0) == {"playbook": 0}
    assert gaps.read("playbook", "pb", expected=1, number=1, offset=0, now=0.1).counts


def test_older_and_repeated_numbers_are_void_and_open_no_gap():
    gaps = MissingNumbers()
    gaps.read("playbook", "pb", expected=1, number=1, offset=0, now=0.0)
    assert gaps.read("playbook", "pb", expected=2, number=1, offset=1, now=0.0) == Reading(counts=False)
    assert gaps.open() == () and gaps.due(1e9) == {}


def test_the_pauses_stop_growing_at_the_last_one():
    gaps = MissingNumbers(pauses_s=(0.0, 3.0))
    gaps.read("promoted", "pb", expected=0, number=2, offset=5, now=0.0)
    times = [t for t in range(0, 20) if gaps.due(float(t))]
    assert times == [0, 3, 6, 9, 12, 15, 18]


def test_gaps_of_two_playbooks_on_one_log_read_it_again_from_the_lower_offset():
    gaps = MissingNumbers()
    gaps.read("playbook", "a", expected=1, number=1, offset=0, now=0.0)
    gaps.read("playbook", "b", expected=1, number=1, offset=3, now=0.0)
    gaps.read("playbook", "b", expected=2, number=3, offset=8, now=0.0)
    gaps.read("playbook", "a", expected=2, number=4, offset=9, now=0.0)
    assert gaps.due(0.0) == {"playbook": 1}


@st.composite
def _logs_read_with_holes(draw):
    """A playbook log (versions 1..n in log order) and the offsets a reader steps over the first time it passes them
    (records still being written). No fenced writer's repeats: a repeat of the missing number read right after a
    hole the reader gave up on cannot be told from the record that counts by its number (the gapless consumer's
    patience is what covers that; docs/client.md says so)."""
    size = draw(st.integers(1, 30))
    return list(range(1, size + 1)), draw(st.sets(st.integers(0, size - 1)))


@settings(max_examples=300, deadline=None)
@given(_logs_read_with_holes())
def test_a_reader_that_reads_again_where_it_is_told_ends_with_the_newest_version_and_never_goes_back(case):
    log, late = case
    gaps, late, newest, served, position, now = MissingNumbers(), set(late), 0, [], 0, 0.0
    for _ in range(4 * len(log) + 4):
        shown = [offset for offset in range(position, len(log)) if offset not in late]
        for offset in shown:  # a fetch steps over the late records before the last one it shows
            newest += gaps.read("playbook", "pb", newest + 1, log[offset], offset, now).counts
            served.append(newest)
        position = shown[-1] + 1 if shown else position
        late.clear()  # written by now: there for every later fetch
        now += 100.0
        position = gaps.due(now).get("playbook", position)
    assert newest == len(log) and served == sorted(served) and gaps.open() == ()


# ------------------------------------------------------------------------------------------------ the binding

def test_the_follower_does_not_serve_a_version_ahead_says_the_gap_and_serves_it_once_the_missing_one_is_read():
    follower, seen = _follower()
    v1, v2, v3 = _version(1), _version(2), _version(3)
    follower._take(Topic.PLAYBOOK, v1.to_json_bytes(), 0, 0.0)
    follower._take(Topic.PLAYBOOK, v3.to_json_bytes(), 2, 0.0)  # version 2, at offset 1, was stepped over
    follower._publish()
    assert follower.state.served == v1 and [(g.log, g.missing, g.ahead) for g in follower.state.gaps] == [
        (Topic.PLAYBOOK, 2, 3)]
    assert follower._rereads(0.0) == {Topic.PLAYBOOK: 1}
    for offset, version in ((1, v2), (2, v3)):
        follower._take(Topic.PLAYBOOK, version.to_json_bytes(), offset, 0.1)
    follower._publish()
    assert follower.state.served == v3 and follower.state.gaps == () and seen == [v1, v3]


def test_a_repeated_or_older_version_is_never_served():
    follower, seen = _follower()
    v1, v2 = _version(1), _version(2)
    records = [v1, v2, _version(2, "a fenced writer's version 2"), _version(1, "an old version 1 again")]
    for offset, version in enumerate(records):
        follower._take(Topic.PLAYBOOK, version.to_json_bytes(), offset, 0.0)
    follower._publish()
    assert follower.state.served == v2 and seen == [v2] and follower.state.gaps == ()


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
    assert follower.state.served == v1 and [g.missing for g in follower.state.gaps] == [1]
    assert follower._rereads(0.0) == {Topic.PROMOTED: 1}
    follower._take(Topic.PROMOTED, decisions[1], 1, 0.1)
    follower._take(Topic.PROMOTED, decisions[2], 2, 0.1)
    follower._publish()
    assert follower.state.served == v3 and follower.state.gaps == ()


class _LateRecordsLog:
    """In memory, what the follower's consumer sees of Tansu while several producers write: each offset in ``late``
    is not in the first fetch that passes it (a write in progress), and is there for every later fetch."""

    def __init__(self, topics: dict[str, list[bytes]], late: set[tuple[str, int]]) -> None:
        self.records, self.late, self.at = topics, set(late), {}
        self._client = SimpleNamespace(force_metadata_update=self._nothing)

    async def _nothing(self) -> None:
        return None

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0} if topic in self.records else None

    def assign(self, tps) -> None:
        self.at = {tp: 0 for tp in tps}

    async def seek_to_beginning(self, *tps) -> None:
        self.at.update({tp: 0 for tp in tps})

    def seek(self, tp, offset: int) -> None:
        self.at[tp] = offset

    async def getmany(self, timeout_ms: int = 0) -> dict:
        await asyncio.sleep(0.001)
        fetched = {}
        for tp, at in self.at.items():
            records = self.records[tp.topic]
            shown = [SimpleNamespace(offset=offset, value=records[offset]) for offset in range(at, len(records))
                     if (tp.topic, offset) not in self.late]
            self.late -= {(tp.topic, offset) for offset in range(at, len(records))}
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
                               late={("t.playbook", 1)})
    task = asyncio.create_task(follower._follow(consumer))  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 5.0
        while (follower.state.served is None or follower.state.served.version < 3) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    versions = [v.version for v in seen]
    assert versions[-1] == 3 and versions == sorted(versions) and follower.state.gaps == ()
