"""Deterministic merge of a batch's partials: one reducer call fewer per version when they do not conflict."""

import asyncio
import itertools
from collections import Counter
from datetime import datetime, timezone

import pytest

from combee_core.models import AddOp, DeleteOp, MergeOp, PartialUpdate, TagOp, UpdateOp, Usage
from combee_core.playbook import Playbook
from combee_core.reduce.deterministic_merge import ContestedMerge, merge_without_conflict
from combee_core.reduce.reduction import ReduceOutcome, build_version, reduce_through_scan

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
A = AddOp(section="dates", content="For leap years (R08), count the end date as included.")
B = AddOp(section="units", content="For API pagination (R18), sort ascending unless told otherwise.")
GENERIC = AddOp(section="general", content="Re-read the question before answering.")


def test_distinct_lessons_and_repeats_merge_with_support_summed_in_a_fixed_order():
    children = [[A, GENERIC, TagOp(entry_id="e1", tag="helpful")],
                [B, GENERIC.model_copy(update={"support": 3}), TagOp(entry_id="e1", tag="helpful", count=2)]]
    merged = merge_without_conflict(children)
    assert merged is not None
    adds = [op for op in merged if isinstance(op, AddOp)]
    assert [(a.section, a.support) for a in adds] == [("dates", 1), ("general", 4), ("units", 1)]
    assert [op for op in merged if isinstance(op, TagOp)] == [TagOp(entry_id="e1", tag="helpful", count=3)]
    for order in itertools.permutations(children):
        assert merge_without_conflict(list(order)) == merged


def test_same_text_in_other_words_case_is_one_lesson():
    louder = A.model_copy(update={"content": A.content.upper()})
    merged = merge_without_conflict([[A], [louder]])
    assert merged is not None and len(merged) == 1 and merged[0].support == 2
    assert merged[0].content == min(A.content, louder.content)


@pytest.mark.parametrize("other", [
    AddOp(section="dates", content="For leap years (R08), count the end date as excluded."),  # contradiction
    AddOp(section="dates", content="In leap years (R08) the end date counts as included."),  # paraphrase
    A.model_copy(update={"section": "units"}),  # one lesson, two sections
])
def test_lessons_that_need_judgement_are_a_conflict(other):
    assert merge_without_conflict([[A], [other]]) is None


def test_similar_lessons_within_one_partial_are_that_aggregators_call():
    other = AddOp(section="dates", content="For leap years (R08), count the end date as excluded.")
    assert merge_without_conflict([[A, other], [B]]) is not None


def test_edits_conflict_only_when_two_different_ones_touch_an_entry():
    update = UpdateOp(entry_id="e1", content="new text")
    delete = DeleteOp(entry_id="e1")
    assert merge_without_conflict([[update], [update]]) == [update]
    assert merge_without_conflict([[update], [DeleteOp(entry_id="e2")]]) == [update, DeleteOp(entry_id="e2")]
    assert merge_without_conflict([[update], [delete]]) is None
    assert merge_without_conflict([[MergeOp(entry_ids=["e1", "e3"], content="both")], [delete]]) is None


def _partial(node: int, operations) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=0, node=node, k=3, base_version=0, operations=operations,
                         reflection_ids=[f"r{node}"], trace_ids=[f"t{node}"], items_read=2, expected_items=2,
                         usage=Usage(calls=1), latency_s=2.0, batch_closed_at=NOW)


def test_scan_calls_the_reducer_only_for_conflicting_partials():
    calls = []

    async def reduce(children):
        calls.append(len(children))
        return ReduceOutcome(operations=[op for ops in children for op in ops][:1], usage=Usage(calls=1),
                             latency_s=5.0)

    clean = [_partial(0, [A]), _partial(1, [B]), _partial(2, [GENERIC])]
    scan = asyncio.run(reduce_through_scan([p.operations for p in clean], 32, reduce, merge=merge_without_conflict))
    assert calls == [] and scan.merged_without_call == 1 and scan.critical_path_s == 0.0
    version = build_version(Playbook.empty("pb"), clean, scan, published_at=NOW).record
    assert len(version.entries) == 3
    assert version.stats.llm_calls == 3 and version.stats.merged_without_call == 1  # the 3 aggregator calls only
    assert version.stats.llm_critical_path_s == 2.0

    paraphrase = AddOp(section="dates", content="In leap years (R08) the end date counts as included.")
    conflicting = [_partial(0, [A]), _partial(1, [paraphrase]), _partial(2, [GENERIC])]
    scan = asyncio.run(reduce_through_scan([p.operations for p in conflicting], 32, reduce,
                                           merge=merge_without_conflict))
    assert calls == [3] and scan.merged_without_call == 0 and scan.critical_path_s == 5.0
    # without the rule every group is a call, as before
    asyncio.run(reduce_through_scan([p.operations for p in clean], 32, reduce))
    assert calls == [3, 3]


def test_similar_lessons_in_different_sections_are_different_lessons():
    # the suite's families share rules across subjects; the playbook files them apart, as does the merge
    r13 = AddOp(section="units", content="For ratios (R13), apply the discount before the tax.")
    r14 = AddOp(section="dates", content="For averages (R14), apply the discount before the tax.")
    assert merge_without_conflict([[r13], [r14]]) is not None
    assert merge_without_conflict([[r13], [r14.model_copy(update={"section": "units"})]]) is None


def test_with_more_partials_than_the_fan_in_the_merge_reads_them_all_at_once_and_calls_stay_within_it():
    lessons = [AddOp(section=f"section_{n}", content=f"Lesson {n}.") for n in range(12)]  # distinct: no conflict
    children = [[lessons[n % 12], lessons[(n + 5) % 12]] for n in range(14)]  # every lesson in several partials
    seen: list[int] = []

    def merge(group):
        seen.append(len(group))
        return merge_without_conflict(group)

    async def never(children):
        raise AssertionError("no call is needed when nothing conflicts")

    results = [asyncio.run(reduce_through_scan(children, fan_in, never, merge=merge)) for fan_in in (2, 3, 6, 14)]
    assert seen == [14] * 4  # one merge over all 14 partials, whatever the fan-in
    assert all(r.operations == results[-1].operations for r in results)  # the tree's shape changes nothing
    appearances = Counter(op.content for ops in children for op in ops)
    assert {a.content: a.support for a in results[0].operations} == appearances  # every lesson once, support summed

    # contested operations: judged by calls that each read at most the fan-in's children
    contested = [[AddOp(section="dates", content=f"For leap years (R08), count the end date as {word}.")]
                 for word in ("included", "excluded") * 4]
    calls: list[int] = []

    async def judge(group):
        calls.append(len(group))
        return ReduceOutcome(operations=[op for ops in group for op in ops][:1], usage=Usage(), latency_s=0.1)

    def contest(group):
        return ContestedMerge(merged=[lessons[0]], contested=contested)

    scan = asyncio.run(reduce_through_scan(children, 3, judge, merge=contest))
    assert calls and max(calls) <= 3 and sum(calls[:3]) == len(contested)  # 8 contested children: 3 + 3 + 2, then up
    assert scan.operations[0] == lessons[0] and scan.narrowed_calls == 1
