"""When an async fleet's batch may close: when the version chain can take it (``batch_close = "chain"``).

A playbook's versions are a chain: batch b is aggregated and reduced on version b and gives version b+1, so a batch
closed while an earlier one is still being built only waits, and the traces that arrive meanwhile go to a later
batch, a cycle later. Closing by size alone at a rate the chain does not keep up with plans batches far ahead of it,
at the size chosen when they closed (issue 44: 24 batches of 40 queued while the controller had moved to 100).

The rule, per playbook, with ``pending`` the batches closed but not yet a version (``next batch id - batches that
are versions``; one of them is being built, the others wait):

- a batch that is *due* by the usual rules (its target size, ``max_wait_s``, idle) closes when the chain is free
  (``pending == 0``), and so does a batch that was *held*, i.e. took reflections while the chain was busy, whatever
  its size, when the streaming controller sets the size (``close_held``): it holds what arrived while the previous
  version was built, and the chain is free for it (waiting for the controller's target would leave the chain idle
  while traces wait; a stopped stream's tail closes as soon as the chain can take it, not after the idle rule). A
  fixed ``batch_size``, or the controller profiling sizes (``controller_objective=delay``), keeps the size asked for;
- while the chain is busy it keeps taking what arrives, up to the ``cap`` (the quality bound: ``controller_bs_max``
  with the controller, else the fixed ``batch_size``); at the cap it closes if that leaves at most one batch waiting
  (``pending <= 1``), else what arrives waits, unbatched and uncommitted, for the next batch.

So the batch size follows the arrival rate (what arrived during one cycle, up to the cap) without a controller round
trip, at most one closed batch ever waits behind the one being built, and a controller's new size applies to every
batch not yet closed. The decision uses only what the batcher was given (reflections, versions' batch ids, times):
the same inputs give the same batches, and a replay follows the recorded manifests anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ChainPacing:
    """The closing rule above for one batcher: ``cap`` is the most traces a batch may hold."""

    cap: int
    close_held: bool = True
    """Close a held batch once the chain is free, whatever its size (the streaming controller's batches); False: a
    held batch still waits to be due (a fixed batch size, or the controller profiling sizes, asked for that size)."""

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError(f"the cap on a batch must be at least 1 trace, got {self.cap}")

    def take(self, open_count: int, target: int) -> int:
        """How many of the open reflections a batch closed now takes (the oldest ones): at most the cap (never
        below the playbook's target, so a target above the cap is not cut short)."""
        return min(open_count, max(self.cap, target))

    def may_close(self, open_count: int, *, due: bool, pending: int, target: int, held: bool = False) -> bool:
        """May the open batch close now? ``due``: by its target size, ``max_wait_s`` or idle; ``pending``: the
        playbook's batches closed and not yet a version; ``held``: the open batch took reflections while the chain
        was busy (``pending > 0``)."""
        if open_count == 0:
            return False
        if pending <= 0:
            return due or (held and self.close_held)
        return open_count >= max(self.cap, target) and pending <= 1


def batches_waiting(pending: int) -> int:
    """Closed batches waiting for the chain: the pending ones but the one being built."""
    return max(0, pending - 1)


ASYNC_QUALITY_BOUND = 160
"""The quality bound of an async fleet: the largest batch within 1 point of sequential on every comparison of the
honest benchmark at fan-in 6 (docs/benchmarks-history.md 12e; 240 is not)."""
SYNC_QUALITY_BOUND = 100
"""A sync fleet's bound: the paper's largest batch. The round-time objective profiles its ladder from the bound
down, and at 160 the demo's 40-agent fleet spent its 480 traces on profiling (docs/architecture.md)."""


def default_quality_bound(fleet_mode: Literal["sync", "async"]) -> int:
    """The quality bound on the batch size when ``controller_bs_max`` is not set (docs/architecture.md, "The quality
    bound"): the controller's largest choice, and the cap of a paced batch."""
    return ASYNC_QUALITY_BOUND if fleet_mode == "async" else SYNC_QUALITY_BOUND
