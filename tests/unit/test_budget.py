"""The playbook's size budget and the per-version delete cap, through ``build_version`` (what the reducer runs)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.budget import added_support, eviction_key, fit_to_budget, removal_cap
from combee_core.models import DeleteOp, MergeOp, Operation, PartialUpdate, PlaybookEntry, Usage
from combee_core.playbook import Playbook, make_entry_id, playbook_tokens
from combee_core.reduction import ScanResult, build_version
from tests.unit.test_playbook import PROPERTY, playbook_and_ops

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def partial(playbook: Playbook) -> PartialUpdate:
    return PartialUpdate(playbook_id=playbook.playbook_id, batch_id=playbook.version, node=0, k=1,
                         base_version=playbook.version, operations=[], items_read=1, expected_items=1,
                         batch_closed_at=NOW, model="m")


def version_of(playbook: Playbook, ops: list[Operation], budget: int | None, cap: float | None):
    scan = ScanResult(operations=ops, usage=Usage(), levels=0, critical_path_s=0.0)
    return build_version(playbook, [partial(playbook)], scan, published_at=NOW, budget_tokens=budget,
                         delete_cap=cap)


def model_removals(before: Playbook, record) -> int:
    """Entries of ``before`` removed by the model's own operations (DELETE, MERGE), not by evictions."""
    removed = 0
    for applied in record.operations:
        if applied.outcome != "applied" or applied.reason.startswith("evicted"):
            continue
        op = applied.operation
        if isinstance(op, DeleteOp):
            removed += op.entry_id in before.entry_ids
        elif isinstance(op, MergeOp):
            removed += sum(1 for e in op.entry_ids[1:] if e in before.entry_ids)
    return removed


@PROPERTY
@given(playbook_and_ops(), st.integers(0, 400), st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]))
def test_property_every_version_is_within_budget_evictions_are_recorded_and_the_cap_holds(case, budget, share):
    before, ops = case
    new = version_of(before, ops, budget, share)
    after = Playbook.from_entries("pb", new.record.version, new.record.entries, new.record.next_entry_number)
    # Within budget, and the published stat says so.
    assert playbook_tokens(after) <= budget and new.record.stats.playbook_tokens == playbook_tokens(after)
    # The model's operations removed no more than the cap allows.
    assert model_removals(before, new.record) <= removal_cap(len(before), share)
    # Every eviction is an applied DELETE with its reason, of an entry the published version does not hold.
    evictions = [a for a in new.record.operations if a.reason.startswith("evicted")]
    assert all(isinstance(a.operation, DeleteOp) and a.outcome == "applied" and "budget" in a.reason
               for a in evictions)
    assert not {a.entry_id for a in evictions} & set(after.entry_ids)
    # Evictions took the lowest-valued entries, and no more than needed: without the last one it was over budget.
    if evictions:
        unbudgeted_version = version_of(before, ops, None, share)
        unbudgeted = unbudgeted_version.playbook
        support = added_support(unbudgeted_version.record.operations)
        evicted = {a.entry_id for a in evictions}
        def key(e):
            return eviction_key(e, support.get(e.entry_id, 0))
        assert max(key(e) for e in unbudgeted.entries if e.entry_id in evicted) < min(
            (key(e) for e in after.entries), default=(10**9,))
        last = evictions[-1].entry_id
        kept_plus_last = [e for e in unbudgeted.entries if e.entry_id not in evicted or e.entry_id == last]
        assert playbook_tokens(Playbook.from_entries("pb", 9, kept_plus_last)) > budget


@PROPERTY
@given(playbook_and_ops())
def test_property_a_version_within_budget_evicts_nothing(case):
    before, ops = case
    unbudgeted = version_of(before, ops, None, None)
    budgeted = version_of(before, ops, playbook_tokens(unbudgeted.playbook), None)
    assert budgeted.record.entries == unbudgeted.record.entries
    assert not any(a.reason.startswith("evicted") for a in budgeted.record.operations)


def entry(n: int, helpful: int = 0, harmful: int = 0, updated: int = 1) -> PlaybookEntry:
    return PlaybookEntry(entry_id=make_entry_id("tools", n), section="tools", content=f"lesson number {n} " * 4,
                         helpful=helpful, harmful=harmful, created_version=1, updated_version=updated)


def test_a_new_entry_backed_by_more_reflections_outlives_one_backed_by_fewer():
    playbook = Playbook.from_entries("pb", 5, [entry(1), entry(2)])
    fitted, evictions = fit_to_budget(playbook, playbook_tokens(Playbook.from_entries("pb", 5, [entry(1)])),
                                      {"too-00001": 4, "too-00002": 1})
    assert [a.entry_id for a in evictions] == ["too-00002"] and "support 1" in evictions[0].reason


def test_eviction_goes_by_value_then_staleness_and_says_why():
    playbook = Playbook.from_entries("pb", 5, [entry(1, helpful=5), entry(2, harmful=2), entry(3, updated=4),
                                               entry(4, updated=2)])
    fitted, evictions = fit_to_budget(playbook, playbook_tokens(playbook) - 1)
    assert [a.entry_id for a in evictions] == ["too-00002"]  # harmful first
    fitted, evictions = fit_to_budget(playbook, playbook_tokens(Playbook.from_entries("pb", 5, [entry(1, 5)])))
    assert [a.entry_id for a in evictions] == ["too-00002", "too-00004", "too-00003"]  # then the stalest
    assert fitted.entry_ids == ("too-00001",)
    assert "over its" in evictions[0].reason and "helpful 0 - harmful 2" in evictions[0].reason


def test_a_model_asked_to_delete_everything_removes_at_most_the_cap():
    """A batch whose traces talked the model into deleting every entry (a prompt injection that worked)."""
    playbook = Playbook.from_entries("pb", 3, [entry(n, helpful=1) for n in range(1, 13)])
    new = version_of(playbook, [DeleteOp(entry_id=e) for e in playbook.entry_ids], None, 0.25)
    assert len(new.record.entries) == 12 - 3
    rejected = [a for a in new.record.operations if a.outcome == "rejected"]
    assert len(rejected) == 9 and all(a.reason.startswith("delete cap") for a in rejected)


@pytest.mark.parametrize(("entries", "share", "cap"), [(0, 0.25, 1), (3, 0.25, 1), (12, 0.25, 3), (10, 1.0, 10)])
def test_removal_cap(entries, share, cap):
    assert removal_cap(entries, share) == cap
