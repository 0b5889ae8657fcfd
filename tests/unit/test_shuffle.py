"""Augmented shuffle: k rule, seed derivation and the plan invariants (property tests)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.batch.shuffle import (
    DEFAULT_CALL_CAPACITY,
    Copy,
    ShufflePlan,
    aggregation_shape,
    derive_seed,
    plan_augmented_shuffle,
    subgroup_count,
)
from combee_core.reduce.scan import plan_scan
from combee_core.settings import CombeeSettings

SETTINGS = settings(max_examples=150, deadline=None)

batch_sizes = st.integers(min_value=1, max_value=300)
copies_per_item = st.integers(min_value=1, max_value=5)
seeds = st.integers(min_value=0, max_value=2**64 - 1)
fan_ins = st.none() | st.integers(min_value=1, max_value=40)


def sizes(plan: ShufflePlan) -> list[int]:
    return [len(group) for group in plan.subgroups]


# ---------------------------------------------------------------------------------------------- k rule


@pytest.mark.parametrize(
    ("n", "p", "max_fan_in", "k"),
    [
        (1, 2, None, 1),
        (3, 2, None, 1),
        (4, 2, None, 2),
        (16, 2, None, 4),
        (99, 2, None, 9),
        (100, 2, 32, 10),  # 200 copies / 10 = 20 per subgroup: within the bound
        (100, 2, 10, 20),  # raised: ceil(200 / 10)
        (400, 2, 32, 25),  # raised: ceil(800 / 32)
        (5, 2, 1, 10),  # one copy per subgroup: k = p*n
    ],
)
def test_subgroup_count_examples(n: int, p: int, max_fan_in: int | None, k: int) -> None:
    assert subgroup_count(n, p, max_fan_in) == k


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, max_fan_in=fan_ins)
def test_subgroup_count_rule(n: int, p: int, max_fan_in: int | None) -> None:
    k = subgroup_count(n, p, max_fan_in)
    paper_k = max(1, math.isqrt(n))
    assert 1 <= k <= p * n
    assert k >= paper_k
    if max_fan_in is None or math.ceil(p * n / paper_k) <= max_fan_in:
        assert k == paper_k
    else:
        assert k == math.ceil(p * n / max_fan_in)
        assert math.ceil(p * n / k) <= max_fan_in


@pytest.mark.parametrize(("n", "p", "max_fan_in"), [(0, 2, None), (3, 0, None), (3, 2, 0)])
def test_subgroup_count_rejects_bad_arguments(n: int, p: int, max_fan_in: int | None) -> None:
    with pytest.raises(ValueError):
        subgroup_count(n, p, max_fan_in)


# ---------------------------------------------------------------------------------------------- sizing to capacity


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, capacity=st.integers(min_value=2, max_value=40), seed=seeds)
def test_no_call_of_the_aggregation_reads_more_than_the_capacity(n: int, p: int, capacity: int, seed: int) -> None:
    shape = aggregation_shape(n, p, capacity)
    plan = plan_augmented_shuffle(n, p, seed, max_fan_in=capacity)
    assert plan.k == shape.k
    assert plan.max_subgroup_size == shape.largest_call <= capacity
    if shape.k > 1:
        scan = plan_scan(shape.k, capacity)
        assert scan.max_group_size <= capacity
        assert (scan.depth, scan.call_count) == (shape.reducer_levels, shape.reducer_calls_at_most)


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, capacity=st.integers(min_value=2, max_value=40))
def test_the_papers_k_is_kept_exactly_when_the_model_holds_its_calls(n: int, p: int, capacity: int) -> None:
    shape = aggregation_shape(n, p, capacity)
    paper_k = max(1, math.isqrt(n))
    holds = math.ceil(p * n / paper_k) <= capacity
    assert shape.paper_rule == holds
    if not holds:  # the fewest calls that fit: one subgroup fewer would overload a call
        assert shape.k - 1 < paper_k or math.ceil(p * n / (shape.k - 1)) > capacity


def test_a_larger_capacity_never_costs_more_calls() -> None:
    calls = [aggregation_shape(100, 2, capacity).calls_at_most for capacity in range(2, 41)]
    assert calls == sorted(calls, reverse=True)


def test_the_default_capacity_is_the_settings_default_and_costs_the_sequential_baselines_calls() -> None:
    assert CombeeSettings.load(env={}).max_fan_in == DEFAULT_CALL_CAPACITY
    for n in (30, 60, 99, 300):  # p = 2 at the default: one aggregator call per 3 traces, as batch 3 with p = 1
        assert aggregation_shape(n, 2, DEFAULT_CALL_CAPACITY).k == math.ceil(n / 3)


@pytest.mark.parametrize("capacity", [0, 1])
def test_aggregation_shape_rejects_a_capacity_below_two(capacity: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        aggregation_shape(10, 2, capacity)


# ---------------------------------------------------------------------------------------------- seeds


def test_derive_seed_is_stable_across_processes() -> None:
    # A fixed value: hash() randomisation or a changed encoding would break replay of recorded batches.
    assert derive_seed(0, "pb", 0) == derive_seed(0, "pb", 0)
    assert derive_seed(7, "playbook-a", 3) == 13154992471595731299


@SETTINGS
@given(run_seed=st.integers(0, 2**32), playbook=st.text(max_size=20), batch=st.integers(0, 10**6))
def test_derive_seed_separates_its_inputs(run_seed: int, playbook: str, batch: int) -> None:
    seed = derive_seed(run_seed, playbook, batch)
    assert 0 <= seed < 2**64
    assert seed != derive_seed(run_seed + 1, playbook, batch)
    assert seed != derive_seed(run_seed, playbook + "x", batch)
    assert seed != derive_seed(run_seed, playbook, batch + 1)


# ---------------------------------------------------------------------------------------------- plan invariants


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, seed=seeds, max_fan_in=fan_ins)
def test_every_item_has_exactly_p_copies(n: int, p: int, seed: int, max_fan_in: int | None) -> None:
    plan = plan_augmented_shuffle(n, p, seed, max_fan_in)
    dealt = [copy for group in plan.subgroups for copy in group]
    assert Counter(dealt) == Counter(Copy(item, replica) for item in range(n) for replica in range(p))
    assert (plan.n, plan.p, plan.k, len(plan.subgroups)) == (n, p, subgroup_count(n, p, max_fan_in), plan.k)


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, seed=seeds, max_fan_in=fan_ins)
def test_subgroups_are_balanced_within_one(n: int, p: int, seed: int, max_fan_in: int | None) -> None:
    plan = plan_augmented_shuffle(n, p, seed, max_fan_in)
    assert max(sizes(plan)) - min(sizes(plan)) <= 1
    assert all(plan.expected_count(g) == len(plan.subgroups[g]) for g in range(plan.k))
    assert sum(plan.expected_count(g) for g in range(plan.k)) == p * n


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, seed=seeds, max_fan_in=fan_ins)
def test_copies_of_an_item_spread_over_distinct_subgroups(n: int, p: int, seed: int, max_fan_in: int | None) -> None:
    plan = plan_augmented_shuffle(n, p, seed, max_fan_in)
    for item in range(n):
        where = plan.subgroup_of_copies(item)
        assert len(where) == p and all(0 <= g < plan.k for g in where)
        if plan.k >= p:
            assert len(set(where)) == p, f"item {item} copies in {where} (k={plan.k})"
        else:  # fewer subgroups than copies: all of them used, as evenly as possible
            per_group = Counter(where)
            assert len(per_group) == plan.k
            assert max(per_group.values()) - min(per_group.values()) <= 1


@pytest.mark.parametrize(("n", "k"), [(16, 4), (36, 6), (9, 3), (100, 10), (64, 8)])
@pytest.mark.parametrize("seed", range(20))
def test_distinct_subgroups_where_naive_round_robin_collides(n: int, k: int, seed: int) -> None:
    # k divides n here: dealing the replica-major sequence round-robin would put both copies of every item in
    # the same subgroup ((n + i) % k == i % k).
    plan = plan_augmented_shuffle(n, 2, seed)
    assert plan.k == k
    assert all(len(set(plan.subgroup_of_copies(item))) == 2 for item in range(n))


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, seed=seeds, max_fan_in=st.integers(min_value=1, max_value=40))
def test_no_subgroup_exceeds_max_fan_in(n: int, p: int, seed: int, max_fan_in: int) -> None:
    plan = plan_augmented_shuffle(n, p, seed, max_fan_in)
    assert plan.max_subgroup_size <= max_fan_in


@SETTINGS
@given(n=batch_sizes, p=copies_per_item, seed=seeds, max_fan_in=fan_ins)
def test_plan_is_deterministic_for_a_seed(n: int, p: int, seed: int, max_fan_in: int | None) -> None:
    assert plan_augmented_shuffle(n, p, seed, max_fan_in) == plan_augmented_shuffle(n, p, seed, max_fan_in)


def test_different_seeds_give_different_plans() -> None:
    plans = {plan_augmented_shuffle(30, 2, seed).subgroups for seed in range(50)}
    assert len(plans) == 50


def test_subgroup_membership_is_mixed_not_lockstep() -> None:
    # With p=2 and an even k, a lockstep deal makes pairs of subgroups hold identical item sets; the per-row
    # offsets must avoid that (checked across seeds, since one seed could produce it by chance).
    identical = 0
    for seed in range(50):
        plan = plan_augmented_shuffle(64, 2, seed)
        members = [frozenset(copy.item for copy in group) for group in plan.subgroups]
        identical += len(members) - len(set(members))
    assert identical == 0


def test_order_within_subgroups_is_shuffled() -> None:
    plan = plan_augmented_shuffle(100, 2, 3)
    assert any(list(group) != sorted(group) for group in plan.subgroups)
    assert any(len({copy.replica for copy in group[:4]}) > 1 for group in plan.subgroups)


def test_small_batches() -> None:
    single = plan_augmented_shuffle(1, 2, 0)
    assert single.k == 1 and sorted(single.subgroups[0]) == [Copy(0, 0), Copy(0, 1)]
    assert single.subgroup_of_copies(0) == (0, 0)
    with pytest.raises(ValueError):
        plan_augmented_shuffle(0, 2, 0)
    with pytest.raises(IndexError):
        single.expected_count(1)
    with pytest.raises(IndexError):
        single.subgroup_of_copies(1)
