"""The augmented shuffle: p copies of each of the n reflections of a batch, dealt into k balanced subgroups.

Pure and deterministic: every random choice comes from ``random.Random(seed)``, with the seed derived from
(run seed, playbook, batch) by :func:`derive_seed` so every process computes the same plan.

Construction (used by :func:`plan_augmented_shuffle`)
-----------------------------------------------------
Shuffle the n items with the seeded RNG and cut the order into ``a = n // k`` full *rows* of k items plus a
*remainder* of ``q = n % k`` items (``n = a*k + q``).

* Full rows: row ``j`` draws a fresh random permutation ``perm_j`` of ``range(k)`` and gives replica ``r`` the
  column offset ``o_{j,r} = perm_j[r % k]``. Replica ``r`` of the item in column ``c`` goes to subgroup
  ``(c + o_{j,r}) mod k``.
* Remainder: draw a random start ``s``; replica ``r`` of the ``t``-th remainder item takes slot
  ``t*p + r`` of a run of ``p*q`` consecutive slots and goes to subgroup ``(s + t*p + r) mod k``.

Proof of the invariants
  * *p copies*: every (item, replica) pair is dealt exactly once, by construction.
  * *Balance ±1*: for a fixed row and replica, ``c -> (c + o) mod k`` is a bijection of ``Z_k``, so every row
    gives every subgroup exactly ``p`` copies and the full rows give exactly ``a*p`` each. The remainder deals
    ``p*q`` consecutive residues mod k, so each subgroup gets ``floor(p*q/k)`` or ``ceil(p*q/k)`` of them. Sizes
    are therefore ``a*p + floor(p*q/k)`` or ``a*p + ceil(p*q/k)``: they differ by at most 1.
  * *Distinct subgroups when k >= p*: in a row the p replicas of the item in column c go to ``c + o_{j,r}``
    with ``o_{j,r} = perm_j[r]`` pairwise distinct for ``r < p <= k``, hence to p distinct subgroups. In the
    remainder they take the p consecutive slots ``t*p .. t*p+p-1``, whose residues mod k are distinct because
    ``p <= k``. (When k < p, both rules still spread an item's copies over all k subgroups, as evenly as possible.)

Why not plain round-robin over the replica-major sequence of p*n copies: with the same order for every replica,
replica r of the item at position i lands in ``(r*n + i) mod k``, so two replicas collide whenever
``(r - r')*n ≡ 0 (mod k)`` — e.g. n = 16, k = 4 puts both copies of every item in the same subgroup; with
independent orders per replica collisions happen at random. Plain item-major round-robin is correct but always
sends an item's copies to neighbouring subgroups in lockstep (for p = 2 and even k, subgroups 2g and 2g+1 end up
with identical members). Fresh offsets per row keep the guarantee and mix the peers each copy is seen with.

The order inside each subgroup is shuffled too.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from functools import cached_property

from combee_core.reduce.scan import plan_scan, scan_depth

__all__ = ["DEFAULT_CALL_CAPACITY", "AggregationShape", "Copy", "ShufflePlan", "aggregation_shape", "derive_seed",
           "plan_augmented_shuffle", "subgroup_count"]

DEFAULT_CALL_CAPACITY = 6
"""Default of ``COMBEE_MAX_FAN_IN``: the most items (reflection copies, partials) one aggregator or reducer call
reads when the user has not said what their model holds. Why 6 (docs/models.md, "How many items one call reads"):
losing a lesson to an overloaded call is silent and cannot be undone, an extra call is visible and costs linearly;
the only call size reported lossless is the sequential baseline's 3 reflections, and at p = 2 a call of 6 copies
makes Combee's aggregator cost exactly the sequential baseline's calls per trace (p*n/6 = n/3)."""


@dataclass(frozen=True, order=True)
class Copy:
    """One copy of a batch item: ``item`` indexes the batch (0..n-1), ``replica`` is 0..p-1."""

    item: int
    replica: int


@dataclass(frozen=True)
class ShufflePlan:
    """Where each of the p copies of the n items of a batch goes: ``subgroups[g]`` lists subgroup g in order."""

    n: int
    p: int
    k: int
    subgroups: tuple[tuple[Copy, ...], ...]

    def expected_count(self, subgroup: int) -> int:
        """Number of copies subgroup ``subgroup`` receives (its aggregator's window size)."""
        if not 0 <= subgroup < self.k:
            raise IndexError(f"subgroup {subgroup} out of range 0..{self.k - 1}")
        return len(self.subgroups[subgroup])

    def subgroup_of_copies(self, item: int) -> tuple[int, ...]:
        """Subgroups holding the copies of ``item``, indexed by replica."""
        if not 0 <= item < self.n:
            raise IndexError(f"item {item} out of range 0..{self.n - 1}")
        return self._locations[item]

    @cached_property
    def _locations(self) -> tuple[tuple[int, ...], ...]:
        where = [[-1] * self.p for _ in range(self.n)]
        for index, group in enumerate(self.subgroups):
            for copy in group:
                where[copy.item][copy.replica] = index
        return tuple(tuple(row) for row in where)

    @property
    def max_subgroup_size(self) -> int:
        """Largest subgroup (the most copies any one aggregator call reads)."""
        return max(len(group) for group in self.subgroups)


def subgroup_count(n: int, p: int = 2, max_fan_in: int | None = None) -> int:
    """Number of subgroups k for a batch of n items copied p times.

    The paper's rule is ``k = max(1, floor(sqrt(n)))``. Our extension: when ``max_fan_in`` is given and the
    largest subgroup, ``ceil(p*n/k)`` copies, would exceed it, k is raised to ``ceil(p*n/max_fan_in)`` so no
    aggregator LLM call reads more than ``max_fan_in`` copies. k never exceeds ``p*n``.
    """
    _check_batch(n, p)
    if max_fan_in is not None and max_fan_in < 1:
        raise ValueError(f"max_fan_in must be >= 1, got {max_fan_in}")
    k = max(1, math.isqrt(n))
    copies = p * n
    if max_fan_in is not None and -(-copies // k) > max_fan_in:
        k = -(-copies // max_fan_in)
    return min(k, copies)


@dataclass(frozen=True)
class AggregationShape:
    """How one batch is aggregated when no call may read more than ``capacity`` items: k aggregator calls (the
    subgroups), then the reducer's scan tree over their k partials, every node of it reading at most ``capacity``."""

    n: int
    p: int
    capacity: int
    k: int

    @property
    def largest_call(self) -> int:
        """Copies the largest subgroup holds (the most one aggregator call reads)."""
        return -(-self.p * self.n // self.k)

    @property
    def paper_rule(self) -> bool:
        """Whether k is the paper's ``floor(sqrt(n))`` (the model holds its calls), not raised for the capacity."""
        return self.k == max(1, math.isqrt(self.n))

    @property
    def reducer_levels(self) -> int:
        """Levels of the reducer's scan above the k partials (0 for a single partial)."""
        return 0 if self.k == 1 else scan_depth(self.k, self.capacity)

    @property
    def reducer_calls_at_most(self) -> int:
        """Reducer calls when every scan group needs one (the deterministic merge makes most of them unneeded)."""
        return 0 if self.k == 1 else plan_scan(self.k, self.capacity).call_count

    @property
    def calls_at_most(self) -> int:
        """LLM calls after the reflector's for the batch: the k aggregator calls and at most the reducer's."""
        return self.k + self.reducer_calls_at_most


def aggregation_shape(n: int, p: int, capacity: int) -> AggregationShape:
    """The aggregation of a batch of n reflections copied p times, for a model that holds ``capacity`` items per call
    (``COMBEE_MAX_FAN_IN``): the paper's k = floor(sqrt(n)) when its calls, ceil(p*n/k) copies, fit; otherwise the
    fewest subgroups that fit, ceil(p*n/capacity); the partials then reduce through a tree of fan-in ``capacity``."""
    if capacity < 2:
        raise ValueError(f"capacity must be >= 2 (a reducer call merges at least two partials), got {capacity}")
    return AggregationShape(n=n, p=p, capacity=capacity, k=subgroup_count(n, p, capacity))


def derive_seed(run_seed: int, playbook_id: str, batch_id: int) -> int:
    """Seed of one batch's shuffle: a 64-bit integer, stable across processes and Python versions (sha256)."""
    material = f"combee-shuffle/v1\x1f{run_seed}\x1f{playbook_id}\x1f{batch_id}".encode()
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


def plan_augmented_shuffle(n: int, p: int, seed: int, max_fan_in: int | None = None, *,
                           k: int | None = None) -> ShufflePlan:
    """Deal p copies of each of n items into :func:`subgroup_count` subgroups, or ``k`` (a batch dealt again as its
    manifest says, whatever the fan-in setting is now; see the module docstring).

    Guarantees: exactly p copies of every item; subgroup sizes differ by at most 1; when k >= p the copies of an
    item are in p distinct subgroups; the same arguments always give the same plan.
    """
    if k is None:
        k = subgroup_count(n, p, max_fan_in)
    elif not 1 <= k <= p * n:
        raise ValueError(f"k must be in [1, p*n] = [1, {p * n}], got {k}")
    rng = random.Random(seed)
    order = list(range(n))
    rng.shuffle(order)
    groups: list[list[Copy]] = [[] for _ in range(k)]

    full_rows, remainder = divmod(n, k)
    for row in range(full_rows):
        offsets = rng.sample(range(k), k)
        for column in range(k):
            item = order[row * k + column]
            for replica in range(p):
                groups[(column + offsets[replica % k]) % k].append(Copy(item, replica))

    start = rng.randrange(k)
    for t, item in enumerate(order[full_rows * k :]):
        for replica in range(p):
            groups[(start + t * p + replica) % k].append(Copy(item, replica))

    for group in groups:
        rng.shuffle(group)
    return ShufflePlan(n=n, p=p, k=k, subgroups=tuple(tuple(group) for group in groups))


def _check_batch(n: int, p: int) -> None:
    if n < 1:
        raise ValueError(f"a batch needs at least one item, got n={n}")
    if p < 1:
        raise ValueError(f"p (copies per item) must be >= 1, got {p}")
