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
  (``pending <= 1``), else what arrives waits, unbatched and uncommitted, for the next batch;
- with ``pipeline`` (the default), a batch closed while the chain builds the one before it (``pending == 1``: at the
  cap, or the *trailing* batch, due because the stream paused) is closed *one ahead*: its aggregators read the newest
  version, the one being built on (``context_lag`` 1: version b-1 for batch b), instead of waiting for version b, and
  the reducer applies its partials to version b when it comes, curating against it as it does every batch. A
  stopped stream's trailing batch is then aggregated while the version before it is still being built, so the
  backlog drains within the rest of that version plus one reduce (about 1-1.5 cycles, not 1.5-2); at the cap, the
  chain's cycle overlaps one batch's aggregation with the other's reduce, so one playbook holds a higher rate. In
  mid-stream below the cap a batch still closes when the chain is free, on the newest version (lag 0): one ahead is
  only for the batch that would otherwise wait, so the staleness it costs is paid where it buys time.

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

    pipeline: bool = True
    """A batch closed while the chain builds another (at the cap, or the trailing batch) is aggregated at once on
    the newest version (one behind the one it is applied to); False: its aggregators wait for that version."""

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError(f"the cap on a batch must be at least 1 trace, got {self.cap}")

    def take(self, open_count: int, target: int) -> int:
        """How many of the open reflections a batch closed now takes (the oldest ones): at most the cap (never
        below the playbook's target, so a target above the cap is not cut short)."""
        return min(open_count, max(self.cap, target))

    def may_close(self, open_count: int, *, due: bool, pending: int, target: int, held: bool = False,
                  trailing: bool = False) -> bool:
        """May the open batch close now? ``due``: by its target size, ``max_wait_s`` or idle; ``pending``: the
        playbook's batches closed and not yet a version; ``held``: the open batch took reflections while the chain
        was busy (``pending > 0``); ``trailing``: it is due because the stream paused (idle: nothing more comes
        soon), so with ``pipeline`` it closes one ahead rather than wait for the chain."""
        if open_count == 0:
            return False
        if pending <= 0:
            return due or (held and self.close_held)
        if pending == 1 and trailing and due and self.pipeline:
            return True
        return open_count >= max(self.cap, target) and pending <= 1

    def context_lag(self, pending: int) -> int:
        """How many versions behind the one it is applied to a batch closed now is aggregated on: 1 when it closes
        one ahead (``pipeline``, the chain busy), else 0 (its aggregators read the version it is applied to)."""
        return 1 if self.pipeline and pending > 0 else 0


def batches_waiting(pending: int) -> int:
    """Closed batches waiting for the chain: the pending ones but the one being built (one closed ahead of it is
    aggregated meanwhile, on the newest version, and its version then waits for the chain)."""
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
