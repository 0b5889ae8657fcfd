"""The suite's order under pytest-xdist: the longest tests first on every worker.

`--dist worksteal` gives each of the N workers one contiguous slice of the collected items (sized as
:func:`worksteal_slices` computes) and lets an idle worker steal from the *end* of the busiest one's queue. In
collection order the longest tests (the durable broker's kill tests, minutes each) sit in the middle of a slice, so a
worker can start one when the others are nearly done, and the suite waits for it alone. Here the tests measured
longest (`tests/longest_tests.txt`, seconds and node id per line, from a `--durations` run) are put at the head of
the slices, longest first, each to the slice with the least measured time so far; every other test keeps its
collection order behind them. Stealing still evens out the short tests at the end. Names listed that the suite no
longer collects are ignored (the list only orders; it never selects or skips a test)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

LONGEST_TESTS = Path(__file__).with_name("longest_tests.txt")

T = TypeVar("T")


def read_longest(path: Path = LONGEST_TESTS) -> dict[str, float]:
    """Node id -> measured seconds, from lines ``<seconds> <node id>`` (``#`` starts a comment)."""
    measured: dict[str, float] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            seconds, node_id = line.split(maxsplit=1)
            measured[node_id] = float(seconds)
    return measured


def worksteal_slices(count: int, workers: int) -> list[int]:
    """The sizes of the slices pytest-xdist's worksteal scheduler first gives ``workers`` workers of ``count``
    items (each takes an even share of what is left)."""
    sizes, left = [], count
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


def longest_first(items: Sequence[T], node_ids: Sequence[str], measured: Mapping[str, float],
                  workers: int) -> list[T]:
    """``items`` reordered so that each worker's first slice opens with its share of the measured tests, longest
    first (greedy: each to the slice with the least measured time), the rest in their order after them."""
    if workers < 2:
        return list(items)
    known = sorted((i for i, node_id in enumerate(node_ids) if node_id in measured),
                   key=lambda i: -measured[node_ids[i]])
    sizes = worksteal_slices(len(items), workers)
    heads: list[list[int]] = [[] for _ in sizes]
    loads = [0.0] * workers
    for index in known:
        open_slices = [w for w in range(workers) if len(heads[w]) < sizes[w]]
        target = min(open_slices, key=lambda w: (loads[w], w))
        heads[target].append(index)
        loads[target] += measured[node_ids[index]]
    placed = set(known)
    rest = iter(i for i in range(len(items)) if i not in placed)
    order: list[int] = []
    for head, size in zip(heads, sizes):
        order += head + [next(rest) for _ in range(size - len(head))]
    return [items[i] for i in order]
