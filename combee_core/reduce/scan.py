"""Parallel-scan planning with bounded fan-in: reduce many partials through a tree no node of which reads more
than ``max_fan_in`` children.

Level 0 holds the ``leaf_count`` partials. Level L groups the ``N_{L-1}`` nodes of the level below into
``ceil(N_{L-1} / max_fan_in)`` contiguous groups whose sizes differ by at most 1; each group becomes one node of
level L. Since ``ceil(ceil(x/f)/f) = ceil(x/f^2)``, level L has ``ceil(leaf_count / f^L)`` nodes, so the tree
ends in a single root after ``depth = ceil(log_f(leaf_count))`` levels (at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ScanPlan", "plan_scan", "scan_call_count", "scan_depth"]


@dataclass(frozen=True)
class ScanPlan:
    """``levels[L-1][g]`` is the tuple of level-(L-1) node indices merged by node g of level L."""

    leaf_count: int
    max_fan_in: int
    levels: tuple[tuple[tuple[int, ...], ...], ...]

    @property
    def depth(self) -> int:
        """Number of reduction levels above the leaves."""
        return len(self.levels)

    def node_count(self, level: int) -> int:
        """Nodes on ``level`` (0 = the leaves, :attr:`depth` = 1, the root)."""
        if not 0 <= level <= self.depth:
            raise IndexError(f"level {level} out of range 0..{self.depth}")
        return self.leaf_count if level == 0 else len(self.levels[level - 1])

    @property
    def max_group_size(self) -> int:
        """Most children any node reads."""
        return max(len(group) for groups in self.levels for group in groups)

    @property
    def call_count(self) -> int:
        """Reducer LLM calls: groups of two or more children (a group of one passes its child through)."""
        return sum(1 for groups in self.levels for group in groups if len(group) >= 2)


def _check_fan_in(max_fan_in: int) -> None:
    if max_fan_in < 2:
        raise ValueError(f"max_fan_in must be >= 2 (a reducer call has to merge at least two inputs), got {max_fan_in}")


def plan_scan(leaf_count: int, max_fan_in: int) -> ScanPlan:
    """Plan the reduction of ``leaf_count`` partials with at most ``max_fan_in`` children per node."""
    _check_fan_in(max_fan_in)
    if leaf_count < 1:
        raise ValueError(f"leaf_count must be >= 1, got {leaf_count}")
    levels: list[tuple[tuple[int, ...], ...]] = []
    nodes = leaf_count
    while True:
        group_count = -(-nodes // max_fan_in)
        levels.append(_balanced_groups(nodes, group_count))
        nodes = group_count
        if nodes == 1:
            break
    return ScanPlan(leaf_count=leaf_count, max_fan_in=max_fan_in, levels=tuple(levels))


def scan_depth(leaf_count: int, max_fan_in: int) -> int:
    """``ceil(log_fan_in(leaf_count))``, at least 1, computed with integers."""
    _check_fan_in(max_fan_in)
    if leaf_count < 1:
        raise ValueError(f"leaf_count must be >= 1, got {leaf_count}")
    depth, reach = 1, max_fan_in
    while reach < leaf_count:
        depth, reach = depth + 1, reach * max_fan_in
    return depth


def scan_call_count(leaf_count: int, max_fan_in: int) -> int:
    """Number of reducer LLM calls the plan makes (groups of one child make none)."""
    return plan_scan(leaf_count, max_fan_in).call_count


def _balanced_groups(nodes: int, group_count: int) -> tuple[tuple[int, ...], ...]:
    """Split ``range(nodes)`` into ``group_count`` contiguous groups, the first ``nodes % group_count`` larger by
    one."""
    base, extra = divmod(nodes, group_count)
    groups = []
    start = 0
    for index in range(group_count):
        size = base + (1 if index < extra else 0)
        groups.append(tuple(range(start, start + size)))
        start += size
    return tuple(groups)
