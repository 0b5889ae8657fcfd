"""What one version costs the version chain when batches are built one after another or two at once.

With the context lag (``COMBEE_CONTEXT_LAG``, docs/architecture.md "Context lag") the chain is a pipeline of depth
``d = 1 + lag``: batch b may start (its aggregators read version b - lag) once the version made by batch b - d is
out, and its reduce applies its partials once the version made by batch b - 1 is out. So a batch's version can come
right after the one before it (its aggregation overlapped that one's reduce), and the gap between versions is then
only the reduce: a small batch after a big one looks almost free, and a controller that fits those gaps chooses
sizes 1 and 2 (docs/benchmarks.md, "Context lag"). This module gives the controller two times per version, from
the batch's close and the chain's publication times alone (no stage's internals):

- ``own_s``: the batch's own time, from when it could start (closed, and its context version out) to its version:
  what a trace waits once its batch is closed, its wait for the chain included.
- ``period_s``: the chain's time per version at this size, what its capacity rests on:
  ``max(min(own, gap), own / d)`` with ``gap`` the time since the previous version. The first term is the sequential
  cycle (the version's delay less its wait for the previous version: the reduce, and the aggregation when the chain
  was idle); the second is the batch's share of a pipeline that holds ``d`` batches at once. With ``d = 1`` both are
  the previous rule, ``min(delay, round)``. In a saturated pipeline of equal batches (aggregation A, reduce R) a
  version comes every ``P = max(R, (A + R) / 2)`` on average and ``own`` is exactly ``2 P``; ``period_s`` is ``P``
  when the reduce dominates and at most ``(A - R) / 2`` more when the aggregation does (versions then come in pairs,
  the gaps alternating A and R, and the sequential term reads A on every other one; property-tested). The first
  term matters when the pipeline is not full: with R > A, half the own time (A + R) / 2 would promise more than the
  serial reduce takes. A small batch whose version follows a big one's within its reduce is charged half its own
  time, which includes its wait behind the big one, instead of that reduce alone. So the rule errs towards larger
  batches (never towards sizes that look free), and reads the previous rule's figure when nothing overlapped. A
  better split (each version's reduce time, from when its partials were complete) needs that time in
  ``BatchMetrics``, which the reducer does not publish yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ChainTimes", "VersionCost", "version_cost"]


@dataclass(frozen=True)
class VersionCost:
    """One version's times (seconds): its chain period and its batch's own time (module docstring)."""

    period_s: float
    own_s: float


def version_cost(closed_at_s: float, published_at_s: float, previous_published_s: float | None,
                 context_published_s: float | None, lag: int) -> VersionCost:
    """The costs of a version published at ``published_at_s`` whose batch closed at ``closed_at_s``.

    ``previous_published_s``: when the version before it was out (None: not known, e.g. the first version after a
    restart); ``context_published_s``: when the version its aggregators read was out (the one made by batch
    b - 1 - lag; None: not known or none, the batch could start at its close). With ``lag`` 0 the two are the same
    version."""
    if lag not in (0, 1):
        raise ValueError(f"lag must be 0 or 1, got {lag}")
    times = (closed_at_s, published_at_s, previous_published_s, context_published_s)
    if not all(t is None or math.isfinite(t) for t in times):
        raise ValueError(f"times must be finite, got {times}")
    if lag == 0:
        context_published_s = previous_published_s
    start = max(closed_at_s, context_published_s) if context_published_s is not None else closed_at_s
    own = max(0.0, published_at_s - start)
    since_previous = max(closed_at_s, previous_published_s) if previous_published_s is not None else start
    sequential = min(own, max(0.0, published_at_s - since_previous))
    return VersionCost(period_s=max(sequential, own / (1 + lag)), own_s=own)


class ChainTimes:
    """Per playbook, the recent versions' publication times by batch id: what :func:`version_cost` needs."""

    def __init__(self, keep: int = 4) -> None:
        if keep < 2:
            raise ValueError(f"keep must be >= 2, got {keep}")
        self.keep = keep
        self._published: dict[int, float] = {}

    def cost(self, batch_id: int, closed_at_s: float, published_at_s: float, round_s: float | None,
             lag: int) -> VersionCost:
        """Record this version and cost it. ``round_s`` (the reducer's time since its previous version) stands in
        for the previous version's publication when that one was not seen here."""
        previous = self._published.get(batch_id - 1)
        if previous is None and round_s is not None:
            previous = published_at_s - round_s
        context = self._published.get(batch_id - 1 - lag) if lag else previous
        self._published[batch_id] = published_at_s
        while len(self._published) > self.keep:
            del self._published[min(self._published)]
        return version_cost(closed_at_s, published_at_s, previous, context, lag)
