"""Issue 26's curation invariants through the reducer's whole path (deterministic merge, the reducer call for what is
contested, ``build_version`` with the budget, the change cap and the evidence of use), not one function at a time:
the merge never drops an operation; a correction never increases the counters of the rule it contradicts; fewer
traces than the configured evidence cannot change what a version evicts. (The change cap over arbitrary operations
is ``tests/unit/test_budget.py``'s first property.)"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timezone
from functools import lru_cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, TagOp, Usage, UseTag
from combee_core.playbook import Playbook, make_entry_id
from combee_core.playbook.conflict import conflict_reason
from combee_core.playbook.embedding import EmbeddingCache, StaticEmbedder
from combee_core.playbook.meaning import SemanticJudge
from combee_core.reduce.deterministic_merge import ContestedMerge, merge_contested, merge_without_conflict
from combee_core.reduce.reduction import ReduceOutcome, build_version, reduce_through_scan
from tests.unit.embedders import static_embedder
from tests.unit.playbook_support import contents

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SECTIONS = ["dates", "units", "general"]

RULES = [  # (rule, its contradiction): the conflict check flips each (asserted below)
    ("For leap years, count the end date as included.", "For leap years, count the end date as excluded."),
    ("Sort by date in descending order to find the most recent order.",
     "Sort by date in ascending order to find the most recent order."),
    ("Always quote column names that contain spaces.", "Never quote column names that contain spaces."),
    ("Apply the discount before the tax.", "Apply the discount after the tax."),
]
UNRELATED = ["Check the units of every input before computing.", "Re-read the question before answering.",
             "Round only the final result, never intermediate values."]


@lru_cache(maxsize=1)
def _embedder() -> StaticEmbedder:
    return static_embedder()


def _judge(semantic: bool) -> SemanticJudge | None:
    return SemanticJudge(EmbeddingCache(_embedder())) if semantic else None


def _partial(node: int, k: int, operations: list[Operation], use_tags: list[UseTag] | None = None) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=3, node=node, k=k, base_version=3, operations=operations,
                         reflection_ids=[f"r{node}"], trace_ids=[f"t{node}"], items_read=1, expected_items=1,
                         batch_closed_at=NOW, model="m", use_tags=use_tags or [])


async def _union(children: list[list[Operation]]) -> ReduceOutcome:
    """A reducer call that keeps every operation it reads (an LLM that judges nothing)."""
    return ReduceOutcome(operations=[op for ops in children for op in ops], usage=Usage(calls=1), latency_s=1.0)


def _version(playbook: Playbook, partials: list[PartialUpdate], *, semantic: bool, budget: int | None,
             share: float | None, min_evidence: int = 10):
    judge = _judge(semantic)
    scan = asyncio.run(reduce_through_scan([p.operations for p in partials], 32, _union,
                                           merge=lambda children: merge_contested(children, judge=judge)))
    return build_version(playbook, partials, scan, published_at=NOW, budget_tokens=budget, change_share=share,
                         min_evidence=min_evidence, judge=judge)


# ------------------------------------------------------------------------------------- the merge drops nothing

adds = st.builds(AddOp, section=st.sampled_from(SECTIONS),
                 content=st.one_of(contents, st.sampled_from([t for pair in RULES for t in pair] + UNRELATED)),
                 support=st.integers(1, 5))
tags = st.builds(TagOp, entry_id=st.sampled_from(["dat-00001", "uni-00002"]), tag=st.sampled_from(["helpful",
                 "harmful"]), count=st.integers(1, 3))
children_of_ops = st.lists(st.lists(st.one_of(adds, adds, tags), max_size=6), min_size=2, max_size=6)


@PROPERTY
@given(children_of_ops, st.booleans())
def test_property_the_merge_keeps_every_adds_support_and_every_tag_merged_or_contested(children, semantic):
    result = merge_contested(children, judge=_judge(semantic))
    merged, contested = (result.merged, result.contested) if isinstance(result, ContestedMerge) else (result, [])
    out = [*merged, *(op for ops in contested for op in ops)]
    support = lambda ops: sum(op.support for op in ops if isinstance(op, AddOp))  # noqa: E731
    assert support(out) == support(op for ops in children for op in ops)
    counts: Counter[tuple[str, str]] = Counter()
    for op in (op for ops in children for op in ops):
        if isinstance(op, TagOp):
            counts[(op.entry_id, op.tag)] += op.count
    assert Counter({(op.entry_id, op.tag): op.count for op in out if isinstance(op, TagOp)}) == counts
    # A contested call reads only the children with contested operations, and no TAG
    assert all(ops and not any(isinstance(op, TagOp) for op in ops) for ops in contested)
    # Without a contest it is the merge without a call, as before
    assert (merge_without_conflict(children, judge=_judge(semantic)) is None) == isinstance(result, ContestedMerge)


def test_one_contradiction_leaves_the_other_lessons_merged_and_the_call_reads_two_children():
    rule, correction = (AddOp(section="dates", content=text) for text in RULES[0])
    others = [AddOp(section="units", content=text) for text in UNRELATED]
    children: list[list[Operation]] = [[rule, others[0]], [others[1]], [correction, others[2]], [others[0]]]
    calls: list[int] = []

    async def reduce(children: list[list[Operation]]) -> ReduceOutcome:
        calls.append(len(children))
        return await _union(children)

    for semantic in (False, True):
        result = merge_contested(children, judge=_judge(semantic))
        assert isinstance(result, ContestedMerge)
        assert result.contested == [[rule], [correction]]
        assert sorted((a.content, a.support) for a in result.merged if isinstance(a, AddOp)) == sorted(
            [(UNRELATED[0], 2), (UNRELATED[1], 1), (UNRELATED[2], 1)])
    scan = asyncio.run(reduce_through_scan(children, 32, reduce, merge=merge_contested))
    assert calls == [2] and scan.narrowed_calls == 1 and scan.merged_without_call == 0


# --------------------------------------------------------------------- a correction never feeds the rule it fixes


@PROPERTY
@given(st.sampled_from(RULES), st.booleans(), st.integers(0, 30), st.integers(0, 30),
       st.lists(st.lists(st.tuples(st.sampled_from(SECTIONS), st.integers(1, 40), st.booleans()), min_size=1,
                         max_size=4), min_size=1, max_size=5),
       st.one_of(st.none(), st.integers(0, 200)), st.sampled_from([None, 0.0, 0.25, 1.0]), st.booleans())
def test_property_a_correction_never_increases_the_counters_of_the_rule_it_contradicts(
        pair, flip, helpful, harmful, batch, budget, share, semantic):
    rule, correction = pair[::-1] if flip else pair
    assert conflict_reason(rule, correction) is not None  # the pair is a contradiction
    entry = PlaybookEntry(entry_id=make_entry_id("dates", 1), section="dates", content=rule, helpful=helpful,
                          harmful=harmful, created_version=1, updated_version=2)
    filler = [PlaybookEntry(entry_id=make_entry_id("units", n + 2), section="units", content=text,
                            created_version=1, updated_version=1) for n, text in enumerate(UNRELATED)]
    playbook = Playbook.from_entries("pb", 3, [entry, *filler])
    # each partial: corrections (any section, any support) and unrelated lessons, in any order
    partials = [_partial(node, len(batch), [AddOp(section=section, content=correction if is_correction else
                                                  UNRELATED[support % len(UNRELATED)], support=support)
                                            for section, support, is_correction in ops])
                for node, ops in enumerate(batch)]
    new = _version(playbook, partials, semantic=semantic, budget=budget, share=share)
    after = {e.entry_id: e for e in new.record.entries}.get(entry.entry_id)
    if after is not None:
        assert (after.helpful, after.harmful) == (helpful, harmful)
    assert all(a.entry_id != entry.entry_id for a in new.record.operations
               if isinstance(a.operation, AddOp) and a.outcome == "applied" and "supersedes" not in a.reason)


# ------------------------------------------------------------- eviction cannot be steered below the evidence


@PROPERTY
@given(st.integers(2, 12).flatmap(lambda m: st.tuples(
    st.just(m),
    st.lists(st.tuples(st.integers(1, 9), st.sampled_from(["helpful", "harmful"]), st.integers(0, m - 2),
                       st.integers(0, 3)), max_size=40))),
       st.integers(3, 9), st.integers(0, 4), st.integers(100, 400), st.sampled_from([None, 0.25, 1.0]))
def test_property_use_tags_from_fewer_traces_than_the_evidence_do_not_change_what_a_version_evicts(
        case, size, new_lessons, budget, share):
    min_evidence, tagging = case
    entries = [PlaybookEntry(entry_id=make_entry_id("tools", n), section="tools", content=f"tool lesson {n} " * 3,
                             helpful=n % 3, created_version=1 + n % 2, updated_version=2) for n in range(1, size + 1)]
    playbook = Playbook.from_entries("pb", 3, entries)
    k = 4
    ops: list[list[Operation]] = [[AddOp(section="qa", content=f"new lesson {n} about answers " * 2)
                                   for n in range(new_lessons) if n % k == node] for node in range(k)]
    # tags of existing or new ids, by at most min_evidence - 1 distinct traces, a trace's tags repeated in partials
    tags = [[UseTag(entry_id=make_entry_id("tools", n), tag=tag, trace_id=f"trace-{t}")
             for n, tag, t, node in tagging if node == part] for part in range(k)]
    plain = _version(playbook, [_partial(n, k, ops[n]) for n in range(k)], semantic=False, budget=budget,
                     share=share, min_evidence=min_evidence)
    steered = _version(playbook, [_partial(n, k, ops[n], tags[n]) for n in range(k)], semantic=False,
                       budget=budget, share=share, min_evidence=min_evidence)
    assert [e.entry_id for e in steered.record.entries] == [e.entry_id for e in plain.record.entries]
    evicted = lambda v: [a.entry_id for a in v.record.operations if a.reason.startswith("evicted")]  # noqa: E731
    assert evicted(steered) == evicted(plain)
