"""When an async fleet's batch may close: when the version chain can take it (``batch_close = "chain"``).

A playbook's versions are a chain: batch b is aggregated and reduced on version b and gives version b+1, so a batch
closed while an earlier one is still being built only waits, and the traces that arrive meanwhile go to a later
batch, a cycle later. Closing by size alone at a rate the chain does not keep up with plans batches far ahead of it,
at the size chosen when they closed (issue 44: 24 batches of 40 queued while the controller had moved to 100).

The rule, per playbook, with ``pending`` the batches closed but not yet a version (``next batch id - batches that
are versions``) and ``lag`` the context lag (``context_lag``, 1 by default; with 1 batch b's aggregators read
version b-1, not version b, so they need not wait for the version being built; 0: they read version b):

- a batch that is *due* by the usual rules (its target size, ``max_wait_s``, idle) closes when the chain can take
  it: when its context version exists, ``pending <= lag`` (with lag 0, the chain is free; with lag 1, at most the
  batch before it is being built, and this one's aggregation overlaps that one's reduce). So does a batch that was
  *held*, i.e. took reflections while batches were in flight (``pending > 0``, whatever the lag), whatever its size,
  when the streaming controller sets the size (``close_held``), once fewer batches are in flight than when it took
  them (and its context exists): it holds what arrived while the previous version was built (waiting for the
  controller's target would leave the chain idle while traces wait; a stopped stream's trailing batch closes as soon
  as its context exists, not after the idle rule, and is aggregated while the version before it is reduced). With
  lag 1: a batch that took reflections while two batches were in flight closes when one is left; one that took them
  while one was in flight closes when none is left (the chain is free), or when due. Counting only what arrived
  while ``pending > lag`` (the first rule of the lag) left the latter waiting for the controller's target, which
  assumes batches built one after another (issue 44, run 3: 160 every 8 s, the chain idle half the time); closing it
  as soon as its context exists made every other batch one trace, which then held the trailing batch behind it. A
  fixed ``batch_size``, or the controller profiling sizes (``controller_objective=delay``), keeps the size asked for;
- while it cannot, it keeps taking what arrives, up to the ``cap`` (the quality bound: ``controller_bs_max`` with the
  controller, else the fixed ``batch_size``); at the cap it closes if that leaves at most one batch waiting for its
  context (``pending <= lag + 1``), else what arrives waits, unbatched and uncommitted, for the next batch.

So the batch size follows the arrival rate (what arrived during one cycle, up to the cap) without a controller round
trip, at most one closed batch ever waits for its context, and a controller's new size applies to every batch not yet
closed. The decision uses only what the batcher was given (reflections, versions' batch ids, times): the same inputs
give the same batches. Which version a batch's aggregators read does not depend on it at all: it is
``max(0, b - lag)`` for every batch, recorded in the manifest (a replay follows the recorded manifests anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ChainPacing:
    """The closing rule above for one batcher: ``cap`` is the most traces a batch may hold."""

    cap: int
    close_held: bool = True
    """Close a held batch once its context exists, whatever its size (the streaming controller's batches); False: a
    held batch still waits to be due (a fixed batch size, or the controller profiling sizes, asked for that size)."""

    lag: int = 0
    """The context lag of the batches (``ShuffleConfig.context_lag``): a batch may close once version b - lag exists."""

    def __post_init__(self) -> None:
        if self.lag < 0:
            raise ValueError(f"the context lag must be at least 0, got {self.lag}")
        if self.cap < 1:
            raise ValueError(f"the cap on a batch must be at least 1 trace, got {self.cap}")

    def take(self, open_count: int, target: int) -> int:
        """How many of the open reflections a batch closed now takes (the oldest ones): at most the cap (never
        below the playbook's target, so a target above the cap is not cut short)."""
        return min(open_count, max(self.cap, target))

    def may_close(self, open_count: int, *, due: bool, pending: int, target: int, held: int = 0) -> bool:
        """May the open batch close now? ``due``: by its target size, ``max_wait_s`` or idle; ``pending``: the
        playbook's batches closed and not yet a version; ``held``: the most batches that were in flight when the
        open batch took a reflection (0: none)."""
        if open_count == 0:
            return False
        if not self.busy(pending):
            return due or (self.close_held and held > pending)
        return open_count >= max(self.cap, target) and pending <= self.lag + 1

    def busy(self, pending: int) -> bool:
        """Can a batch closed now not start at once: its context version (b - lag) is not a version yet?"""
        return pending > self.lag


def batches_waiting(pending: int, lag: int = 0) -> int:
    """Closed batches waiting for the chain: the pending ones but those being built (the one reduced next and, with a
    context lag, the ``lag`` after it, whose aggregators read versions that exist)."""
    return max(0, pending - 1 - lag)


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
