"""Entries consolidated (``combee_core.playbook.consolidation``, issue 38: one lesson kept in several entries when the
reducer model is silent): two entries whose wordings together the judge calls one lesson become one, the older
surviving with the other's wordings as aliases, no counter raised; a conflict, a reason that sets a pair apart or a
call's keep-both keeps them apart; a merge is a change under the cap; challenges follow the survivor.

The wordings are this test's own (retrying failed uploads, compressing images), written for it; none is from a
bench data set or the simulator's registry."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import (
    AddOp,
    Challenge,
    MergeOp,
    Operation,
    OutcomeTally,
    PartialUpdate,
    PlaybookEntry,
    PlaybookVersion,
    TagOp,
    Usage,
)
from combee_core.playbook import ApplyResult, Playbook, apply_operations
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import Judgement, SemanticJudge
from combee_core.playbook.uncertain import UncertainJudge
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome
from tests.unit.embedders import minilm_embedder

WAIT = ["Wait 30 seconds before retrying a failed upload.",
        "After an upload fails, pause for 30 seconds before the next attempt."]
PAUSE = ["Give a failed upload a 30-second pause before trying again.",
         "Space retries of a failed upload 30 seconds apart."]
FIVE = ["Wait 5 seconds before retrying a failed upload.", "Retry a failed upload after a 5-second pause."]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
IMAGES = ["Compress images before uploading them.", "Shrink image files before they are sent to the server."]


@lru_cache(maxsize=1)
def _minilm() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(minilm_embedder()))


def _entry(number: int, wordings: Sequence[str], helpful: int = 0, **update: object) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"upl-{number:05d}", section="uploads", content=wordings[0], helpful=helpful,
                         aliases=list(wordings[1:]), created_version=1, updated_version=1).model_copy(update=update)


def _apply(entries: Sequence[PlaybookEntry], operations: Sequence[Operation], judge: object,
           **options: object) -> ApplyResult:
    return apply_operations(Playbook.from_entries("pb", 1, entries), operations, 2, judge=judge,  # type: ignore[arg-type]
                            **options)  # type: ignore[arg-type]


def _touch(entry_id: str) -> TagOp:
    """A TAG: the entry changed in this version (so its pairs are compared)."""
    return TagOp(entry_id=entry_id, tag="helpful", count=1)


def test_two_entries_of_one_lesson_become_the_older_without_a_counter_raised() -> None:
    judge = UncertainJudge.trusting(_minilm())  # after a reducer call that said nothing
    result = _apply([_entry(1, WAIT, helpful=2), _entry(2, PAUSE)], [_touch("upl-00002")], judge)
    [kept] = result.playbook.entries
    assert (kept.entry_id, kept.content, kept.aliases) == ("upl-00001", WAIT[0], [WAIT[1], *PAUSE])
    assert kept.helpful == 2  # its own evidence (3) outweighs the other's (2): kept whole, not summed
    [merge] = result.consolidated
    assert merge.operation == MergeOp(entry_ids=["upl-00001", "upl-00002"], content=WAIT[0])
    assert merge.outcome == "applied" and merge.reason.startswith(
        "consolidated upl-00002 into upl-00001, no counter raised: their wordings are one lesson")
    assert result.changed == ("upl-00002",)  # a change, under the cap


def test_a_flipped_quantity_another_lesson_or_a_calls_keep_both_stay_apart() -> None:
    judge = UncertainJudge.trusting(_minilm())
    result = _apply([_entry(1, WAIT), _entry(2, FIVE), _entry(3, IMAGES)],
                    [_touch("upl-00002"), _touch("upl-00003")], judge)
    assert [e.content for e in result.playbook.entries] == [WAIT[0], FIVE[0], IMAGES[0]]
    assert result.consolidated == []
    kept = UncertainJudge.trusting(_minilm(), frozenset({(PAUSE[1], WAIT[0])}))  # a call kept one pair apart
    result = _apply([_entry(1, WAIT), _entry(2, PAUSE)], [_touch("upl-00002")], kept)
    assert len(result.playbook) == 2 and result.consolidated == []


REQUEST_ID = ["Keep the request ID fixed across retries; do not create a new one inside the retry loop.",
              "Create the request ID once, before the retry loop, and send the same one on every retry."]
JITTER = ["Do not let every client retry on the same fixed schedule; add a random delay to each retry.",
          "Add jitter to the backoff so that clients do not stampede a recovering server.",
          "Synchronised clients hammer a server that just came back; randomise their waits."]


def test_two_established_lessons_on_one_subject_are_not_merged_on_the_few_wordings_that_meet() -> None:
    """Both entries hold several wordings: the request-ID lesson's two are each close to one wording of the jitter
    lesson (both say "retry"), but the jitter lesson's wordings, on average, are not the request-ID lesson."""
    judge = UncertainJudge.trusting(_minilm())
    result = _apply([_entry(1, REQUEST_ID), _entry(2, JITTER)], [_touch("upl-00002")], judge)
    assert [e.content for e in result.playbook.entries] == [REQUEST_ID[0], JITTER[0]]
    assert result.consolidated == []
    verdict = _minilm().judge_lessons(JITTER, REQUEST_ID)
    assert verdict.kind == "distinct" and "on average" in verdict.reason


def test_the_lexical_judge_consolidates_nothing() -> None:
    result = apply_operations(Playbook.from_entries("pb", 1, [_entry(1, WAIT), _entry(2, [WAIT[0] + " Always."])]),
                              [_touch("upl-00002")], 2)
    assert len(result.playbook) == 2 and result.consolidated == []


class TableJudge:
    """Wordings are one lesson when listed together in ``same`` (or equal), set apart when in ``apart``."""

    def __init__(self, same: Sequence[tuple[str, str]] = (), apart: Sequence[tuple[str, str]] = (),
                 lessons: Sequence[tuple[str, str]] = ()) -> None:
        self.same = {frozenset(pair) for pair in same}
        self.apart = {frozenset(pair) for pair in apart}
        self.lessons = {frozenset(pair) for pair in lessons}
        """Entries (by their texts) one lesson by their wordings together, though no two wordings are."""

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old or frozenset((new, old)) in self.same:
            return Judgement("same", 0.9, "table", reinforces=False)
        if frozenset((new, old)) in self.apart:
            return Judgement("distinct", 0.9, "table: apart", apart=True)
        return Judgement("distinct", 0.1, "table: far")

    def judge_lessons(self, texts: Sequence[str], others: Sequence[str]) -> Judgement:
        if any(frozenset((t, o)) in self.apart for t in texts for o in others):
            return Judgement("distinct", 0.9, "table: apart", apart=True)
        if frozenset((texts[0], others[0])) in self.lessons or all(
                any(self.judge(o, "", t, "").kind == "same" for t in texts) for o in others):
            return Judgement("same", 0.9, "table", reinforces=False)
        return Judgement("distinct", 0.1, "table: far")


def test_the_stronger_sides_evidence_is_kept_whole_and_its_challenges_follow_the_survivor() -> None:
    older = _entry(1, ["a"], helpful=0, outcome=OutcomeTally(successes=1000))
    newer = _entry(2, ["b"], helpful=4, used_helpful=3, outcome=OutcomeTally(successes=2000, failures=1000))
    challenges = [Challenge(entry_id=entry_id, entry_content=text, section="uploads", content=content, support=support,
                            first_version=1, last_version=1)
                  for entry_id, text, content, support in [("upl-00001", "a", "x", 1), ("upl-00002", "b", "x", 2),
                                                           ("upl-00002", "b", "y", 1)]]
    playbook = Playbook.from_entries("pb", 1, [older, newer], challenges=challenges)
    result = apply_operations(playbook, [_touch("upl-00002")], 2, judge=TableJudge(same=[("a", "b")]))
    [kept] = result.playbook.entries
    assert (kept.entry_id, kept.content, kept.aliases) == ("upl-00001", "a", ["b"])
    assert (kept.helpful, kept.used_helpful, kept.outcome) == (5, 3, newer.outcome)  # the newer's, +1 from the TAG
    assert [(c.entry_id, c.entry_content, c.content, c.support) for c in result.playbook.challenges] == [
        ("upl-00001", "a", "x", 3), ("upl-00001", "a", "y", 1)]  # re-pointed, one correction's supports summed


def test_a_merge_is_a_change_the_cap_can_refuse_and_untouched_pairs_are_not_compared() -> None:
    entries = [_entry(1, ["a"]), _entry(2, ["b"])]
    judge = TableJudge(same=[("a", "b")])
    assert len(_apply(entries, [_touch("upl-00002")], judge, max_changes=0).playbook) == 2
    assert len(_apply(entries, [], judge).playbook) == 2  # neither side changed in this version
    result = _apply(entries[:1], [AddOp(section="uploads", content="c")], TableJudge(lessons=[("a", "c")]),
                    max_changes=0)
    assert result.applied[0].reason == "added"  # "c" was no match for "a" alone when it came ...
    [kept] = result.playbook.entries  # ... but is its lesson with it; a new entry merged changes no old one
    assert (kept.content, kept.aliases) == ("a", ["c"])


WORDINGS = ["w0", "w1", "w2", "w3", "w4", "w5"]


@settings(max_examples=80, deadline=None)
@given(same=st.sets(st.tuples(st.sampled_from(WORDINGS), st.sampled_from(WORDINGS))),
       apart=st.sets(st.tuples(st.sampled_from(WORDINGS), st.sampled_from(WORDINGS))),
       helpful=st.lists(st.integers(0, 5), min_size=6, max_size=6))
def test_no_counter_rises_and_no_pair_set_apart_ends_in_one_entry(same: set[tuple[str, str]],
                                                                  apart: set[tuple[str, str]],
                                                                  helpful: list[int]) -> None:
    apart_pairs = {pair for pair in apart if pair[0] != pair[1]}
    judge = TableJudge(same=sorted(same - apart_pairs), apart=sorted(apart_pairs))
    entries = [_entry(n + 1, [w], helpful=h, updated_version=1) for n, (w, h) in enumerate(zip(WORDINGS, helpful,
                                                                                               strict=True))]
    playbook = Playbook.from_entries("pb", 1, entries)
    operations = [_touch(e.entry_id) for e in entries]  # every entry changed in this version: every pair compared
    first = apply_operations(playbook, [*operations, AddOp(section="uploads", content="new")], 2, judge=judge)
    again = apply_operations(playbook, [*operations, AddOp(section="uploads", content="new")], 2, judge=judge)
    assert first == again  # pure and in playbook order: a replay makes the same merges
    for entry in first.playbook.entries:
        wordings = [entry.content, *entry.aliases]
        assert not any(frozenset((a, b)) in judge.apart for a in wordings for b in wordings)
        assert entry.helpful <= max(helpful) + 1  # the TAG's 1, never a sum
    held = sorted(w for e in first.playbook.entries for w in (e.content, *e.aliases))
    assert held == sorted([*WORDINGS, "new"])  # no wording lost (well under the alias bound)


async def _echo(children: list[list[Operation]], context: str) -> ReduceOutcome:
    return ReduceOutcome([op for child in children for op in child], Usage(calls=1), 0.0)


def _version() -> PlaybookVersion:
    """One batch through the reducer's processor, a real reducer model that says nothing (the echo)."""
    reducer = Reducer(ReducerConfig(ask_reducer=True), _echo, minilm_embedder())
    playbook = Playbook.from_entries("pb", 1, [_entry(1, WAIT, helpful=2), _entry(2, PAUSE)])
    partial = PartialUpdate(playbook_id="pb", batch_id=1, node=0, k=1, base_version=1, operations=[
        AddOp(section="uploads", content="Failed uploads are retried with a 30-second delay.")],
        reflection_ids=["r1"], trace_ids=["t1"], items_read=1, expected_items=1, batch_closed_at=NOW)
    effects = asyncio.run(reducer.next_version(playbook, [partial], parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    return record


def test_through_the_reducer_the_merge_is_recorded_and_a_replay_makes_it_alike() -> None:
    record = _version()
    assert [e.entry_id for e in record.entries] == ["upl-00001"]
    assert [a.reason.split(",")[0] for a in record.operations if isinstance(a.operation, MergeOp)] == [
        "consolidated upl-00002 into upl-00001"]
    assert _version().to_json_bytes() == record.to_json_bytes()  # byte for byte
