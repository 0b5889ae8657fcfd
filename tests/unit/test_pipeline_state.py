"""The stages' pure state machines: batching, windows, pending partials and the scan reduction."""

import asyncio
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.aggregate.windows import SubgroupWindows
from combee_core.batch.batching import BatchAccumulator, ShuffleConfig, deal_batch
from combee_core.batch.shuffle import subgroup_count
from combee_core.models import AddOp, Insight, PartialUpdate, Reflection, Usage
from combee_core.playbook import Playbook
from combee_core.reduce.reduction import PendingPartials, ReduceOutcome, build_version, reduce_through_scan

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def reflection(i: int, playbook_id: str = "pb") -> Reflection:
    return Reflection(reflection_id=f"r-{i}", trace_id=f"t-{i}", playbook_id=playbook_id, seen_version=0,
                      insights=[Insight(section="general", content=f"insight {i}")], model="sim")


def test_batches_close_at_size_and_ids_are_sequential():
    acc = BatchAccumulator(ShuffleConfig(run_seed=1, p=2, max_fan_in=32), default_batch_size=4)
    closed = [acc.add(reflection(i), now=0.0, wall_time=NOW) for i in range(9)]
    batches = [c for c in closed if c is not None]
    assert [b.manifest.batch_id for b in batches] == [0, 1]
    assert batches[0].manifest.trace_ids == ["t-0", "t-1", "t-2", "t-3"]
    assert acc.open_count("pb") == 1


def test_duplicate_trace_ids_are_ignored_even_after_restore():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=2)
    first = acc.add(reflection(0), 0.0, NOW) or acc.add(reflection(1), 0.0, NOW)
    assert first is not None
    assert acc.add(reflection(0), 0.0, NOW) is None and acc.open_count("pb") == 0
    restored = BatchAccumulator(ShuffleConfig(), default_batch_size=2)
    restored.restore(first.manifest)
    assert restored.is_duplicate(reflection(1))
    assert restored.next_base_version("pb") == 1


def test_the_dedupe_horizon_forgets_the_oldest_batched_traces_only():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=2, dedupe_horizon=4)
    for i in range(6):
        acc.add(reflection(i), 0.0, NOW)
    assert acc.forgotten("pb") == 2
    assert not acc.is_duplicate(reflection(0)) and not acc.is_duplicate(reflection(1))
    assert all(acc.is_duplicate(reflection(i)) for i in range(2, 6))
    resent = acc.add(reflection(0), 0.0, NOW)
    assert resent is None and acc.open_count("pb") == 1  # batched again: it left the horizon


def test_the_open_batch_is_deduped_whatever_the_horizon():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=5, dedupe_horizon=1)
    acc.add(reflection(0), 0.0, NOW)
    assert acc.add(reflection(0), 0.0, NOW) is None and acc.open_count("pb") == 1
    closed = [acc.add(reflection(i), 0.0, NOW) for i in range(1, 5)][-1]
    assert closed is not None and closed.manifest.trace_ids == [f"t-{i}" for i in range(5)]
    assert acc.is_duplicate(reflection(4)) and not acc.is_duplicate(reflection(3))


def test_a_zero_horizon_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        BatchAccumulator(ShuffleConfig(), default_batch_size=2, dedupe_horizon=0)


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=120),
    batch_size=st.integers(min_value=1, max_value=7),
    horizon=st.integers(min_value=1, max_value=20),
)
def test_a_restore_from_manifests_dedupes_exactly_like_the_live_batcher(arrivals, batch_size, horizon):
    live = BatchAccumulator(ShuffleConfig(), default_batch_size=batch_size, dedupe_horizon=horizon)
    manifests = []
    for i in arrivals:
        closed = live.add(reflection(i), 0.0, NOW)
        if closed is not None:
            manifests.append(closed.manifest)
            assert len(set(closed.manifest.trace_ids)) == len(closed.manifest.trace_ids)
    manifests.extend(closed.manifest for closed in live.close_expired(1.0, 0.5, NOW))
    restored = BatchAccumulator(ShuffleConfig(), default_batch_size=batch_size, dedupe_horizon=horizon)
    for manifest in manifests:
        restored.restore(manifest)
    for i in range(31):
        assert live.is_duplicate(reflection(i)) == restored.is_duplicate(reflection(i))
    batched = sum(m.n for m in manifests)
    assert live.forgotten("pb") == restored.forgotten("pb") == max(0, batched - horizon)


def test_max_wait_closes_a_non_empty_batch_only():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=100)
    assert acc.close_expired(now=100.0, max_wait_s=1.0, wall_time=NOW) == []
    acc.add(reflection(0), now=10.0, wall_time=NOW)
    assert acc.close_expired(now=10.5, max_wait_s=1.0, wall_time=NOW) == []
    (closed,) = acc.close_expired(now=11.0, max_wait_s=1.0, wall_time=NOW)
    assert closed.manifest.closed_by == "max_wait" and closed.manifest.n == 1


def test_deal_batch_makes_p_copies_with_positions_and_is_seeded():
    refl = [reflection(i) for i in range(40)]
    a = deal_batch("pb", 3, refl, ShuffleConfig(run_seed=5, p=2), target_batch_size=40, closed_by="size",
                   closed_at=NOW)
    b = deal_batch("pb", 3, refl, ShuffleConfig(run_seed=5, p=2), target_batch_size=40, closed_by="size",
                   closed_at=NOW)
    assert a == b
    assert len(a.copies) == 80 and a.manifest.k == subgroup_count(40, 2, ShuffleConfig().max_fan_in)
    per_reflection = {}
    for copy in a.copies:
        per_reflection.setdefault(copy.reflection.reflection_id, set()).add(copy.subgroup)
        assert copy.expected_count == a.manifest.subgroup_sizes[copy.subgroup]
        assert copy.base_version == 3
    assert all(len(groups) == 2 for groups in per_reflection.values())
    naive = deal_batch("pb", 0, refl, ShuffleConfig(p=1, subgroups="single"), target_batch_size=40,
                       closed_by="size", closed_at=NOW)
    assert naive.manifest.k == 1 and len(naive.copies) == 40


def test_window_completes_at_expected_count_ignoring_redelivery_and_late_copies():
    batch = deal_batch("pb", 0, [reflection(i) for i in range(9)], ShuffleConfig(p=2), target_batch_size=9,
                       closed_by="size", closed_at=NOW)
    windows = SubgroupWindows()
    group0 = [c for c in batch.copies if c.subgroup == 0]
    assert len(group0) == group0[0].expected_count == 6
    results = []
    for copy in reversed(group0):
        results.append(windows.add(copy, 0.0))
        if len(results) == 1:
            assert windows.add(copy, 0.0) == ("duplicate", None)
    assert [outcome for outcome, _ in results] == ["added"] * 6
    assert all(ready is None for _, ready in results[:-1])
    ready = results[-1][1]
    assert ready is not None and ready.closed_by == "complete" and ready.missing == 0
    assert [c.position for c in ready.copies] == list(range(6))
    assert windows.add(group0[0], 0.0) == ("late", None)


def test_window_timeout_reports_missing_copies():
    batch = deal_batch("pb", 0, [reflection(i) for i in range(9)], ShuffleConfig(p=2), target_batch_size=9,
                       closed_by="size", closed_at=NOW)
    windows = SubgroupWindows()
    group = [c for c in batch.copies if c.subgroup == 1]
    for copy in group[:-1]:
        windows.add(copy, now=1.0)
    assert windows.expired(now=2.0, timeout_s=5.0) == []
    (ready,) = windows.expired(now=6.0, timeout_s=5.0)
    assert ready.closed_by == "timeout" and ready.missing == 1
    assert [c.position for c in ready.copies] == sorted(c.position for c in ready.copies)


def partial(batch_id: int, node: int, k: int, ops=None) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=batch_id, node=node, k=k, base_version=batch_id,
                         operations=ops or [AddOp(section="general", content=f"b{batch_id} n{node}")],
                         reflection_ids=[f"r-{batch_id}-{node}"], trace_ids=[f"t-{batch_id}-{node}"], items_read=2,
                         expected_items=2, usage=Usage(calls=1), batch_closed_at=NOW)


def test_pending_partials_wait_for_all_k_and_for_their_base_version():
    pending = PendingPartials()
    assert pending.add(partial(1, 0, 2), current_version=0)
    assert pending.add(partial(1, 1, 2), current_version=0)
    assert pending.pop_ready(0) is None
    assert pending.add(partial(0, 1, 2), current_version=0)
    assert not pending.add(partial(0, 1, 2), current_version=0)
    assert pending.pop_ready(0) is None
    pending.add(partial(0, 0, 2), current_version=0)
    assert [p.node for p in pending.pop_ready(0)] == [0, 1]
    assert [p.batch_id for p in pending.pop_ready(1)] == [1, 1]
    assert not pending.add(partial(0, 0, 2), current_version=2)


def test_scan_never_reads_more_than_fan_in_and_builds_contiguous_version():
    calls = []

    async def reduce(children):
        calls.append(len(children))
        return ReduceOutcome(operations=[op for ops in children for op in ops], usage=Usage(calls=1), latency_s=1.0)

    partials = [partial(0, node, 10) for node in range(10)]
    scan = asyncio.run(reduce_through_scan([p.operations for p in partials], max_fan_in=3, reduce=reduce))
    assert max(calls) <= 3 and scan.levels >= 2
    assert len(scan.operations) == 10
    new = build_version(Playbook.empty("pb"), partials, scan, published_at=NOW)
    assert new.record.version == 1 and new.record.parent_version == 0
    assert new.record.lineage == sorted(f"t-0-{n}" for n in range(10))
    assert len(new.record.entries) == 10 and new.playbook.version == 1
    assert new.record.stats.llm_calls == 10 + len(calls)


def test_single_partial_needs_no_reduce_call():
    async def reduce(children):
        raise AssertionError("no call expected")

    scan = asyncio.run(reduce_through_scan([[AddOp(section="general", content="x")]], 4, reduce))
    assert scan.levels == 0 and scan.usage.calls == 0


def _unconfirmed_fixture(n: int = 10):
    from datetime import datetime, timezone

    from combee_core.batch.batching import ShuffleConfig, UnconfirmedBatches, deal_batch
    from combee_core.models import Insight, Reflection

    config = ShuffleConfig(run_seed=4, p=2, max_fan_in=32)
    reflections = [
        Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, model="m",
                   insights=[Insight(section="tools", content=f"lesson {i}")])
        for i in range(n)
    ]
    original = deal_batch("pb", 3, reflections, config, target_batch_size=n, closed_by="max_wait",
                          closed_at=datetime(2026, 1, 2, tzinfo=timezone.utc))
    return UnconfirmedBatches(config, keep_per_playbook=2), original, reflections


def test_an_unconfirmed_batch_is_re_dealt_identically_once_all_its_reflections_are_back():
    unconfirmed, original, reflections = _unconfirmed_fixture()
    unconfirmed.restore(original.manifest)
    back = list(reversed(reflections))  # order of return does not matter: the manifest fixes the order
    assert all(unconfirmed.collect(r) is None for r in back[:-1])
    again = unconfirmed.collect(back[-1])
    assert again is not None
    assert again.copies == original.copies and again.manifest == original.manifest
    assert unconfirmed.batch_of(reflections[0]) is None  # forgotten: a later client resend is a plain duplicate


def test_a_batch_is_re_dealt_as_its_manifest_says_when_the_fan_in_setting_changed_meanwhile():
    from dataclasses import replace

    from combee_core.batch.batching import UnconfirmedBatches

    _, original, reflections = _unconfirmed_fixture(n=16)  # dealt at fan-in 32: k = 4 calls of 8 copies
    assert original.manifest.k == 4
    unconfirmed = UnconfirmedBatches(replace(ShuffleConfig(run_seed=4, p=3), max_fan_in=6))  # now p 3, fan-in 6
    unconfirmed.restore(original.manifest)
    again = [unconfirmed.collect(r) for r in reflections][-1]
    assert again is not None and again.copies == original.copies and again.manifest == original.manifest


def test_only_the_latest_manifests_stay_unconfirmed():
    unconfirmed, original, reflections = _unconfirmed_fixture()
    unconfirmed.restore(original.manifest)
    for later in (4, 5):
        unconfirmed.restore(original.manifest.model_copy(update={"batch_id": later, "trace_ids": [f"x{later}"]}))
    assert unconfirmed.batch_of(reflections[0]) is None
    assert unconfirmed.collect(reflections[0]) is None
