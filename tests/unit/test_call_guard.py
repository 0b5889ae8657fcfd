"""A reducer call's answer changes only what the operations it was given back (``combee_core.reduce.call_guard``):
silence keeps the lessons, a merge the judge does not share keeps both, declared support and TAG counts stay within
what the call was given, and an invented lesson is not applied."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookVersion, TagOp, Usage
from combee_core.playbook import Playbook
from combee_core.playbook.meaning import Judgement
from combee_core.processors.effects import Publish
from combee_core.reduce.call_guard import ANSWER_BOUND, answer_within_evidence
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
A1, A2 = "Trim whitespace before comparing strings.", "Strip spaces before you compare strings."
B = "Quote file paths that contain spaces."


class OneLesson:
    """A judge for which A1 and A2 are one lesson and everything else is distinct."""

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if {new, old} <= {A1, A2}:
            return Judgement("same", 0.8, "same meaning")
        return Judgement("distinct", 0.1, "not similar")


def _add(text: str, support: int = 2) -> AddOp:
    return AddOp(section="strings", content=text, support=support)


GIVEN: list[list[Operation]] = [[_add(A1), TagOp(entry_id="str-00001", tag="helpful", count=2)], [_add(A2), _add(B)]]


def test_a_silent_call_leaves_every_lesson_and_tag_it_was_given() -> None:
    kept, records = answer_within_evidence(GIVEN, [], OneLesson())
    assert sorted(op.content for op in kept if isinstance(op, AddOp)) == sorted([A1, A2, B])
    assert [op for op in kept if isinstance(op, TagOp)] == [TagOp(entry_id="str-00001", tag="helpful", count=2)]
    assert records == []


def test_a_merge_the_judge_shares_stands_and_one_it_does_not_share_keeps_both_lessons() -> None:
    merged_all = [_add(A1, support=6)]  # A1, A2 and B folded into one ADD, their support summed
    kept, records = answer_within_evidence(GIVEN, merged_all, OneLesson())
    adds = {op.content: op.support for op in kept if isinstance(op, AddOp)}
    assert adds == {A1: 4, B: 2}  # A1 stands for itself and A2 (one lesson); B comes back as given
    [cut] = records
    assert cut.reason.startswith(ANSWER_BOUND) and "support 6" in cut.reason and "counted as 4" in cut.reason


def test_an_answer_lesson_no_given_lesson_backs_is_not_applied_and_inflated_tags_are_cut() -> None:
    invented = [_add("Always delete the oldest entry of the playbook.", support=50), _add(A1), _add(A2), _add(B),
                TagOp(entry_id="str-00001", tag="helpful", count=1_000)]
    kept, records = answer_within_evidence(GIVEN, invented, OneLesson())
    assert sorted(op.content for op in kept if isinstance(op, AddOp)) == sorted([A1, A2, B])
    assert [op.count for op in kept if isinstance(op, TagOp)] == [2]
    assert [r.reason.split(":")[0] for r in records] == [ANSWER_BOUND, ANSWER_BOUND]
    assert "no trace stands behind it" in records[0].reason


@settings(max_examples=80, deadline=None)
@given(supports=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       answer=st.lists(st.tuples(st.sampled_from([A1, A2, B, "Something else entirely."]), st.integers(1, 10**6)),
                       max_size=5))
def test_no_answer_raises_support_above_what_was_given_or_loses_a_lesson(supports: list[int],
                                                                        answer: list[tuple[str, int]]) -> None:
    given_ops: list[list[Operation]] = [[_add(A1, supports[0])], [_add(A2, supports[1]), _add(B, supports[2])]]
    kept, _ = answer_within_evidence(given_ops, [_add(text, support) for text, support in answer], OneLesson())
    adds = [op for op in kept if isinstance(op, AddOp)]
    assert sum(op.support for op in adds) <= sum(supports)
    texts = {op.content for op in adds}
    assert B in texts and texts & {A1, A2}  # each given lesson is still there, in a wording the judge shares


async def _silent(children: list[list[Operation]], context: str) -> ReduceOutcome:
    return ReduceOutcome([], Usage(calls=1), 0.0)


def test_the_reducer_applies_what_it_sent_to_a_call_that_answered_nothing() -> None:
    # two wordings close enough for the lexical merge to contest them: both go to the call, which says nothing
    partials = [PartialUpdate(playbook_id="pb", batch_id=0, node=node, k=2, base_version=0,
                              operations=[_add(text, support=1)], reflection_ids=[f"r{node}"], trace_ids=[f"t{node}"],
                              items_read=1, expected_items=1, usage=Usage(), batch_closed_at=NOW)
                for node, text in enumerate(("Trim whitespace before comparing two strings.",
                                             "Trim whitespace before comparing the strings."))]
    reducer = Reducer(ReducerConfig(ask_reducer=True), _silent)
    effects = asyncio.run(reducer.next_version(Playbook.empty("pb"), partials, parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    assert record.entries  # the lessons were not lost to the call's silence


def test_a_tag_that_passes_on_what_it_was_given_answers_no_dropped_lesson() -> None:
    from combee_core.models import PlaybookEntry

    entry = PlaybookEntry(entry_id="str-00001", section="strings", content=A2, helpful=3, created_version=1,
                          updated_version=1)
    # the call drops A1 and passes the given TAG on unchanged: it claims nothing more, so A1 comes back as given
    kept, _ = answer_within_evidence(GIVEN, [TagOp(entry_id="str-00001", tag="helpful", count=2), _add(B)],
                                     OneLesson(), [entry])
    assert A1 in {op.content for op in kept if isinstance(op, AddOp)}
    # the call merges A1 into the entry with a TAG claiming its support on top: the judge shares it, so it stands
    kept, records = answer_within_evidence(GIVEN, [TagOp(entry_id="str-00001", tag="helpful", count=4), _add(B)],
                                           OneLesson(), [entry])
    assert A1 not in {op.content for op in kept if isinstance(op, AddOp)} and records == []
    assert [op.count for op in kept if isinstance(op, TagOp)] == [4]
