"""The batcher's replay mode: batches follow recorded manifests whatever the arrival order or batch size."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from combee_core.batch.batch_plan import BatchPlanError, PlannedBatches
from combee_core.batch.batching import BatchAccumulator, ShuffleConfig
from combee_core.models import Insight, Reflection

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
LATER = datetime(2026, 6, 1, tzinfo=timezone.utc)
CONFIG = ShuffleConfig(run_seed=3, p=2, max_fan_in=32)


def reflection(i: int, playbook_id: str = "pb") -> Reflection:
    return Reflection(reflection_id=f"r-{i}", trace_id=f"t-{i}", playbook_id=playbook_id, seen_version=0,
                      insights=[Insight(section="general", content=f"insight {i}")], model="sim")


def recorded_batches(count: int, sizes: list[int]):
    """Batches formed by the normal accumulator with changing target sizes (as the controller would)."""
    acc = BatchAccumulator(CONFIG, default_batch_size=sizes[0])
    closed, i = [], 0
    for size in sizes:
        acc.set_target("pb", size)
        while True:
            batch = acc.add(reflection(i), 0.0, NOW)
            i += 1
            if batch is not None:
                closed.append(batch)
                break
    assert i == count
    return closed


def test_plan_reproduces_recorded_batches_in_any_arrival_order():
    recorded = recorded_batches(27, [5, 9, 3, 10])
    plan = PlannedBatches(CONFIG, [b.manifest for b in recorded])
    arrivals = [reflection(i) for i in range(27)]
    random.Random(1).shuffle(arrivals)
    released = [batch for r in arrivals for batch in plan.add(r, LATER)]
    assert [b.manifest.batch_id for b in released] == [0, 1, 2, 3]
    for got, want in zip(released, recorded):
        assert got.manifest.model_copy(update={"closed_at": NOW}) == want.manifest
        assert [c.model_copy(update={"batch_closed_at": NOW}) for c in got.copies] == list(want.copies)
    assert plan.remaining("pb") == 0


def test_a_batch_waits_for_its_predecessor_and_restored_batches_are_skipped():
    recorded = recorded_batches(6, [3, 3])
    plan = PlannedBatches(CONFIG, [b.manifest for b in recorded])
    assert [plan.add(reflection(i), NOW) for i in (3, 4, 5)] == [[], [], []]  # batch 1 complete, batch 0 not
    assert plan.add(reflection(0), NOW) == [] and plan.add(reflection(1), NOW) == []
    assert [b.manifest.batch_id for b in plan.add(reflection(2), NOW)] == [0, 1]

    resumed = PlannedBatches(CONFIG, [b.manifest for b in recorded])
    resumed.restore(recorded[0].manifest)
    assert resumed.remaining("pb") == 1
    assert resumed.add(reflection(0), NOW) == []  # a late copy of a published batch changes nothing
    released = [b for i in (3, 4, 5) for b in resumed.add(reflection(i), NOW)]
    assert [b.manifest.batch_id for b in released] == [1]


def test_unplanned_traces_and_broken_plans_are_refused():
    recorded = recorded_batches(6, [3, 3])
    plan = PlannedBatches(CONFIG, [b.manifest for b in recorded])
    assert plan.batch_of(reflection(99)) is None
    with pytest.raises(BatchPlanError, match="not in the batch plan"):
        plan.add(reflection(99), NOW)
    with pytest.raises(BatchPlanError, match="batch 1 where batch 0 was expected"):
        PlannedBatches(CONFIG, [recorded[1].manifest])
    twice = recorded[1].manifest.model_copy(update={"trace_ids": ["t-0", "t-4", "t-5"]})
    with pytest.raises(BatchPlanError, match="trace t-0 is in batches 0 and 1"):
        PlannedBatches(CONFIG, [recorded[0].manifest, twice])


def test_a_replay_deals_each_batch_with_its_recorded_context_lag_whatever_the_setting_is_now():
    """Issue 44: the version a batch's aggregators read is the recorded manifest's (``context_lag``), not the
    replay's setting: the replay's copies name the same version for the aggregators."""
    recorded = recorded_batches(6, [3, 3])
    ahead = recorded[1].manifest.model_copy(update={"context_lag": 1})
    plan = PlannedBatches(CONFIG, [recorded[0].manifest, ahead])
    released = [batch for i in range(6) for batch in plan.add(reflection(i), LATER)]
    assert [b.manifest.context_lag for b in released] == [0, 1]
    assert {c.base_version - c.context_lag for c in released[1].copies} == {0}
