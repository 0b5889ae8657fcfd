"""Parallel-scan plan: fan-in bound, coverage, single root, depth formula (property tests)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.reduce.scan import ScanPlan, plan_scan, scan_call_count, scan_depth

SETTINGS = settings(max_examples=200, deadline=None)

leaves = st.integers(min_value=1, max_value=5000)
fan_ins = st.integers(min_value=2, max_value=64)


def exact_depth(leaf_count: int, fan_in: int) -> int:
    """Smallest L >= 1 with fan_in**L >= leaf_count, i.e. ceil(log_fan_in(leaf_count)) in exact arithmetic."""
    depth = 1
    while fan_in**depth < leaf_count:
        depth += 1
    return depth


@SETTINGS
@given(leaf_count=leaves, fan_in=fan_ins)
def test_no_group_exceeds_fan_in_and_groups_are_balanced(leaf_count: int, fan_in: int) -> None:
    plan = plan_scan(leaf_count, fan_in)
    assert plan.max_group_size <= fan_in
    for groups in plan.levels:
        group_sizes = [len(group) for group in groups]
        assert min(group_sizes) >= 1
        assert max(group_sizes) - min(group_sizes) <= 1


@SETTINGS
@given(leaf_count=leaves, fan_in=fan_ins)
def test_every_node_is_a_child_of_exactly_one_group(leaf_count: int, fan_in: int) -> None:
    plan = plan_scan(leaf_count, fan_in)
    for level, groups in enumerate(plan.levels):
        children = sorted(child for group in groups for child in group)
        assert children == list(range(plan.node_count(level)))
        assert plan.node_count(level + 1) == len(groups)


@SETTINGS
@given(leaf_count=leaves, fan_in=fan_ins)
def test_single_root_at_the_depth_of_the_formula(leaf_count: int, fan_in: int) -> None:
    plan = plan_scan(leaf_count, fan_in)
    assert len(plan.levels[-1]) == 1
    assert plan.node_count(plan.depth) == 1
    assert plan.depth == exact_depth(leaf_count, fan_in) == scan_depth(leaf_count, fan_in)
    # the level sizes follow ceil(leaf_count / fan_in**L)
    for level in range(plan.depth + 1):
        assert plan.node_count(level) == -(-leaf_count // fan_in**level)
    if leaf_count > 1:
        assert plan.depth == max(1, math.ceil(math.log(leaf_count) / math.log(fan_in) - 1e-9))


@SETTINGS
@given(leaf_count=st.integers(min_value=1, max_value=64), fan_in=fan_ins)
def test_one_level_when_the_leaves_fit_one_call(leaf_count: int, fan_in: int) -> None:
    if leaf_count <= fan_in:
        plan = plan_scan(leaf_count, fan_in)
        assert plan.levels == ((tuple(range(leaf_count)),),)
        assert plan.depth == 1


@SETTINGS
@given(leaf_count=leaves, fan_in=fan_ins)
def test_call_count_counts_merging_groups(leaf_count: int, fan_in: int) -> None:
    plan = plan_scan(leaf_count, fan_in)
    calls = scan_call_count(leaf_count, fan_in)
    assert calls == sum(1 for groups in plan.levels for group in groups if len(group) > 1)
    # a tree merging leaf_count leaves with calls of fan-in >= 2 needs at least (leaf_count-1)/(fan_in-1) calls
    assert calls >= math.ceil((leaf_count - 1) / (fan_in - 1))
    assert calls <= max(0, leaf_count - 1)


def test_examples() -> None:
    assert plan_scan(10, 3).levels == (
        ((0, 1, 2), (3, 4, 5), (6, 7), (8, 9)),
        ((0, 1), (2, 3)),
        ((0, 1),),
    )
    assert scan_call_count(10, 3) == 7
    assert plan_scan(1, 2).levels == (((0,),),)
    assert scan_call_count(1, 2) == 0
    assert scan_call_count(32, 32) == 1
    assert plan_scan(33, 32).levels == ((tuple(range(17)), tuple(range(17, 33))), ((0, 1),))


def test_plan_is_a_frozen_value() -> None:
    plan = plan_scan(7, 2)
    assert isinstance(plan, ScanPlan) and plan == plan_scan(7, 2)
    with pytest.raises(AttributeError):
        plan.levels = ()  # type: ignore[misc]
    with pytest.raises(IndexError):
        plan.node_count(plan.depth + 1)


@pytest.mark.parametrize("fan_in", [1, 0, -3])
def test_fan_in_below_two_is_rejected(fan_in: int) -> None:
    with pytest.raises(ValueError, match="max_fan_in must be >= 2"):
        plan_scan(5, fan_in)


def test_no_leaves_is_rejected() -> None:
    with pytest.raises(ValueError, match="leaf_count"):
        plan_scan(0, 4)
