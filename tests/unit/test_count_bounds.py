"""Counts a model declares are bounded by the distinct traces behind them (``combee_core.reduce.counts``): an ADD's
support or a TAG's count of 1,000,000 neither supersedes an established rule nor makes one unsupersedable, and every
cut is recorded in the version with its reason."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, TagOp, Usage
from combee_core.playbook import Playbook
from combee_core.processors.effects import Publish
from combee_core.reduce.counts import COUNT_BOUND
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RULE = "Apply the discount after computing tax on invoice totals."
FLIP = "Apply the discount before computing tax on invoice totals."
HUGE = 1_000_000


def _playbook(*entries: PlaybookEntry) -> Playbook:
    return Playbook.from_entries("pb", 3, entries)


def _established(helpful: int = 4) -> PlaybookEntry:
    return PlaybookEntry(entry_id="inv-00001", section="invoices", content=RULE, helpful=helpful,
                         created_version=1, updated_version=2)


def _partial(node: int, k: int, ops: list[Operation], traces: list[str], base: int = 3) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=base, node=node, k=k, base_version=base, operations=ops,
                         reflection_ids=[f"r-{t}" for t in traces], trace_ids=sorted(set(traces)),
                         items_read=len(traces), expected_items=len(traces), usage=Usage(), batch_closed_at=NOW)


async def _union(children: list[list[Operation]], context: str) -> ReduceOutcome:
    return ReduceOutcome([op for ops in children for op in ops], Usage(calls=1), 0.0)


def _version(playbook: Playbook, partials: list[PartialUpdate], **config: object) -> PlaybookVersion:
    reducer = Reducer(ReducerConfig(**config), _union)  # type: ignore[arg-type]
    effects = asyncio.run(reducer.next_version(playbook, partials, parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    return record


def _bounds(record: PlaybookVersion) -> list[str]:
    return [a.reason for a in record.operations if a.reason.startswith(COUNT_BOUND) or COUNT_BOUND in a.reason]


def test_an_add_declaring_a_million_supporters_from_two_traces_does_not_supersede_an_established_rule() -> None:
    playbook = _playbook(_established())
    record = _version(playbook, [_partial(0, 1, [AddOp(section="invoices", content=FLIP, support=HUGE)],
                                          ["t1", "t2"])])
    assert [e.content for e in record.entries] == [RULE]  # kept: support 2 does not outweigh evidence 5
    [bound] = _bounds(record)
    assert "support 1000000" in bound and "counted as 2" in bound
    [add] = [a for a in record.operations if a.outcome == "rejected" and not a.reason.startswith(COUNT_BOUND)]
    assert "support 2" in add.reason


def test_a_tag_of_a_million_raises_a_counter_by_the_traces_behind_it_and_the_rule_stays_supersedable() -> None:
    playbook = _playbook(_established(helpful=0))
    tagged = _version(playbook, [_partial(0, 2, [TagOp(entry_id="inv-00001", tag="helpful", count=HUGE)], ["t1"]),
                                 _partial(1, 2, [TagOp(entry_id="inv-00001", tag="helpful", count=HUGE)],
                                          ["t1", "t2"])])
    [entry] = tagged.entries
    assert entry.helpful == 2  # two distinct traces behind the batch, whatever the two partials declared
    # two partials cut; the summed 3 copies at p = 2 (3 copies of 2 reflections) stand for 2 traces: no cut at the root
    assert len(_bounds(tagged)) == 2
    after = Playbook.from_entries("pb", tagged.version, tagged.entries, tagged.next_entry_number)
    correction = [AddOp(section="invoices", content=FLIP, support=4)]
    record = _version(after, [_partial(0, 1, correction, ["u1", "u2", "u3", "u4"], base=4)], change_cap=1.0)
    assert [e.content for e in record.entries] == [FLIP]  # support 4 outweighs evidence 3


def test_many_operations_on_one_entry_raise_its_counter_by_at_most_the_batch_traces() -> None:
    playbook = _playbook(_established(helpful=0))
    tags: list[Operation] = [TagOp(entry_id="inv-00001", tag="helpful", count=3) for _ in range(50)]
    reducer = Reducer(ReducerConfig(deterministic_merge=False), _union)  # the call's 50 TAGs are not summed first
    effects = asyncio.run(reducer.next_version(playbook, [_partial(0, 2, tags, ["t1", "t2", "t3"]),
                                                         _partial(1, 2, [], ["t4"])],
                                              parent_version=None, manifest=None, previous_at=None, now=NOW))
    [version] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    assert version.entries[0].helpful == 4
    assert any("may rise by at most 4" in reason for reason in _bounds(version))


_TRACES = [f"t{n}" for n in range(8)]


@st.composite
def _batches(draw: st.DrawFn) -> tuple[list[PartialUpdate], bool]:
    k = draw(st.integers(1, 4))
    ops = st.one_of(
        st.builds(AddOp, section=st.sampled_from(["invoices", "dates"]),
                  content=st.sampled_from([RULE, FLIP, "Write dates as ISO 8601.", "Sum the column twice."]),
                  support=st.integers(1, HUGE)),
        st.builds(TagOp, entry_id=st.just("inv-00001"), tag=st.sampled_from(["helpful", "harmful"]),
                  count=st.integers(1, HUGE)),
    )
    partials = [_partial(node, k, draw(st.lists(ops, max_size=6)),
                         draw(st.lists(st.sampled_from(_TRACES), min_size=1, max_size=5)))  # copies across partials
                for node in range(k)]
    return partials, draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(_batches())
def test_property_no_count_above_the_distinct_traces_behind_it_for_any_operations(
        case: tuple[list[PartialUpdate], bool]) -> None:
    partials, deterministic = case
    playbook = _playbook(_established(helpful=3))
    record = _version(playbook, partials, deterministic_merge=deterministic, change_cap=1.0)
    traces = len({t for p in partials for t in p.trace_ids})
    for applied in record.operations:
        op = applied.operation
        count = op.support if isinstance(op, AddOp) else op.count if isinstance(op, TagOp) else 0
        assert applied.outcome == "rejected" and applied.reason.startswith(COUNT_BOUND) or count <= traces
    before = playbook.entries[0]
    for entry in record.entries:
        if entry.entry_id == before.entry_id:
            assert entry.helpful - before.helpful <= traces and entry.harmful - before.harmful <= traces
        else:
            assert entry.helpful <= traces and entry.harmful <= traces


def test_the_shuffle_copies_of_a_batch_count_in_its_distinct_traces_and_an_honest_count_is_never_cut() -> None:
    # p = 2: each of the two traces is read by both partials, and both partials restate the rule from both traces
    playbook = _playbook(_established(helpful=4))
    restated = [AddOp(section="invoices", content=RULE, support=2)]
    record = _version(playbook, [_partial(0, 2, restated, ["t1", "t2"]), _partial(1, 2, restated, ["t1", "t2"])])
    assert _bounds(record) == []  # 4 copies at p = 2 are the batch's 2 traces: nothing to cut
    [entry] = record.entries
    assert entry.helpful == 4 + 2  # the two traces, not their four copies
