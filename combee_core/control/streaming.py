"""The controller's streaming objective (async fleets): a batch size whose versions keep up with the arrival rate.

One playbook's versions are made one after the other: a batch of ``bs`` traces takes a *cycle* ``C(bs)`` (its
aggregator calls, in parallel, then the reduce) from when the previous version is out to when its own is, so the
version chain takes at most ``bs / C(bs)`` traces per second. Reflections arrive at the batcher at ``rate``; below
``bs >= rate * C(bs)`` the backlog grows every cycle, whatever else the batch size buys. Above it, a larger batch
only makes traces wait longer for their batch to fill. So the controller picks the size that minimises the modelled
trace -> version latency

    L(bs) = bs / (2 * rate)          the mean wait for the batch to fill
          + C(bs)                    the batch's own cycle
          + C(bs) * u / (2 * (1 - u))  the queue for the version chain, u = rate * C(bs) / bs (M/D/1)

over the sizes in [bs_min, bs_max] that keep the chain's utilisation ``u`` below ``max_utilisation`` (headroom, so
that a burst drains). ``bs_max`` is the quality bound. When no size in the bounds keeps up, the choice is
``bs_max`` and the decision says the playbook is over capacity (:attr:`StreamChoice.over_capacity`).

The cycle is measured per version (``combee_core.control.chain_costs``: with batches built one after another, batch
closed or previous version out, whichever is later -> version out, i.e. the version's delay less its wait for the
previous one; with the context lag, two batches built at once, the larger of that and half the batch's own time) and
modelled as ``C(bs) = c * bs**beta``: fitted in log space
once two sizes are measured (beta clamped to [0, 1]); with one size, beta = 1/2, what the augmented shuffle implies
(k = sqrt(bs) subgroups of 2 * sqrt(bs) copies each, read in parallel; the reduce reads k partials). A size the
playbook has run at (twice or more, among its recent versions) is judged by its own cycles (their median), not by
the model: the model extrapolates, and in docs/benchmarks-history.md §12b its beta = 1/2 from the ramp's batches of 40
said 100 took 11.3 traces/s while versions of 100 came every 4.1-4.7 s (21-24 traces/s). So the playbook is said
to be over capacity only on the bound's measured cycle: until then the choice is the bound, to measure it. The
arrival rate is the traces of the recent batches over the time between their closes.

**The floor.** No size is modelled faster than the fastest version measured (``CycleModel.floor_s``, the smallest of
the recent cycles): a version has costs that do not shrink with its batch (at least one aggregator call, the reduce,
curation, publication), which ``c * bs**beta`` extrapolated below the sizes measured ignores. With beta fitted at
1 (the outside fleet at load ~30, issue 44: a backlog, arrivals at the batcher measured at 3 traces/s, the cycle
fitted as 0.252 * bs) every size took the same traces per second and 1 minimised the latency; floored, a size must
hold what arrives during the fastest version.

With two batches built at once the chain's period and a batch's own time differ (a version every ``C(bs)``, each
batch ``W(bs)`` ~ 2 * C(bs) from its start to its version): ``C`` gives the utilisation and the queue, ``W`` (fitted
and measured the same way, from :attr:`~combee_core.control.chain_costs.VersionCost.own_s`) takes the place of the
batch's own cycle in ``L(bs)``. Built one after another, ``W = C`` and ``L`` is the formula above.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

from combee_core.control.delay_model import fit_power_law

__all__ = ["CycleModel", "StreamChoice", "StreamingObjective"]

SHUFFLE_BETA = 0.5
"""Growth of the cycle with the batch size before two sizes are measured (module docstring)."""


@dataclass(frozen=True)
class CycleModel:
    """``C(bs) = max(c * bs**beta, floor_s)`` seconds per version."""

    c: float
    beta: float
    fitted: bool
    floor_s: float = 0.0
    """The fastest version measured: no size is modelled faster (module docstring, "The floor")."""

    def cycle_s(self, batch_size: int) -> float:
        return max(float(self.c * batch_size**self.beta), self.floor_s)

    def describe(self) -> str:
        how = "fitted" if self.fitted else f"one size measured, beta {SHUFFLE_BETA:g} assumed"
        floor = f", at least {self.floor_s:.3g} s" if self.floor_s > 0 else ""
        return f"cycle {self.c:.3g}*bs^{self.beta:.2f} s{floor} ({how})"


@dataclass(frozen=True)
class StreamChoice:
    """The streaming objective's choice and what it rests on."""

    batch_size: int
    rate_per_s: float
    cycle: CycleModel
    latency_s: float | None
    """Modelled trace -> version latency at the choice (None when over capacity)."""
    capacity_per_s: float
    """Traces per second the version chain takes at the choice (``bs / C(bs)``)."""
    over_capacity: bool
    measured_cycle_s: float | None = None
    """The chosen size's own median cycle, when it has run at it (None: the model's extrapolation)."""

    def reason(self, bs_min: int, bs_max: int, max_utilisation: float) -> str:
        head = f"streaming: arrivals {self.rate_per_s:.3g} traces/s, {self.cycle.describe()}"
        if self.measured_cycle_s is not None:
            head += f", {self.measured_cycle_s:.3g} s measured at {self.batch_size}"
        if self.latency_s is None:
            if self.measured_cycle_s is None:
                verdict = "modelled, not measured: going there to measure it"
            else:
                verdict = "the playbook falls behind" if self.over_capacity else "it keeps up without headroom"
            return (f"{head}; no size in [{bs_min}, {bs_max}] keeps the version chain below {max_utilisation:.0%} "
                    f"busy: {self.batch_size} (the quality bound) takes {self.capacity_per_s:.3g} traces/s, {verdict}")
        return (f"{head}; {self.batch_size} minimises the modelled trace -> version latency "
                f"({self.latency_s:.3g} s) among the sizes that keep up (chain capacity there "
                f"{self.capacity_per_s:.3g} traces/s)")


class StreamingObjective:
    """Per playbook: recent batches' closes and cycles in, the batch size that keeps up out."""

    def __init__(self, bs_min: int, bs_max: int, max_utilisation: float = 0.8, window: int = 8) -> None:
        if not 1 <= bs_min <= bs_max:
            raise ValueError(f"need 1 <= bs_min <= bs_max, got {bs_min}, {bs_max}")
        if not 0 < max_utilisation < 1:
            raise ValueError(f"max_utilisation must be in (0, 1), got {max_utilisation}")
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.bs_min, self.bs_max, self.max_utilisation, self.window = bs_min, bs_max, max_utilisation, window
        self._closes: deque[tuple[float, int]] = deque(maxlen=window)
        self._cycles: deque[tuple[int, float]] = deque(maxlen=self.cycles_kept(window))
        self._own: deque[tuple[int, float]] = deque(maxlen=self.cycles_kept(window))

    @staticmethod
    def cycles_kept(window: int = 8) -> int:
        """Versions whose cycles the objective keeps (the fit's window; the closes keep ``window``)."""
        return 4 * window

    def observe(self, batch_size: int, closed_at_s: float, cycle_s: float, own_s: float | None = None) -> None:
        """One version: its batch's size, when the batch closed (epoch seconds), its cycle (the chain's period,
        seconds) and its batch's own time (seconds; None: the cycle, batches built one after another)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        own = cycle_s if own_s is None else own_s
        if not (math.isfinite(closed_at_s) and math.isfinite(cycle_s) and cycle_s >= 0 and math.isfinite(own)
                and own >= 0):
            raise ValueError(f"closed_at_s, cycle_s and own_s must be finite (the times >= 0), got {closed_at_s}, "
                             f"{cycle_s}, {own_s}")
        self._closes.append((closed_at_s, batch_size))
        if cycle_s > 0:
            self._cycles.append((batch_size, cycle_s))
            self._own.append((batch_size, max(own, cycle_s)))

    def rate_per_s(self) -> float | None:
        """Traces per second reaching the batcher: the recent batches after the first over the time their closes
        span (None before two batches with distinct close times)."""
        closes = sorted(self._closes)
        if len(closes) < 2 or closes[-1][0] <= closes[0][0]:
            return None
        return sum(size for _, size in closes[1:]) / (closes[-1][0] - closes[0][0])

    def cycle_model(self) -> CycleModel | None:
        return _fit_times(self._cycles)

    def own_model(self) -> CycleModel | None:
        """The model of a batch's own time (``W(bs)``, module docstring)."""
        return _fit_times(self._own)

    def measured_cycle_s(self, batch_size: int) -> float | None:
        """The median of the size's own recent cycles (the last ``window`` of them), when it has at least two."""
        return _measured(self._cycles, batch_size, self.window)

    def choose(self) -> StreamChoice | None:
        """The size that minimises the modelled latency among those that keep up (None until rate and cycle are
        known); a size run at judged by its own cycles."""
        rate, cycle, own_model = self.rate_per_s(), self.cycle_model(), self.own_model()
        if rate is None or cycle is None or own_model is None:
            return None
        sizes = {size for size, _ in self._cycles if self.bs_min <= size <= self.bs_max}
        measured = {size: own for size in sizes if (own := self.measured_cycle_s(size)) is not None}
        measured_own = {size: own for size in sizes if (own := _measured(self._own, size, self.window)) is not None}
        best: tuple[float, int] | None = None
        for size in range(self.bs_min, self.bs_max + 1):
            c = measured.get(size) or cycle.cycle_s(size)
            utilisation = rate * c / size
            if utilisation >= self.max_utilisation:
                continue
            w = max(c, measured_own.get(size) or own_model.cycle_s(size))
            latency = size / (2 * rate) + w + c * utilisation / (2 * (1 - utilisation))
            if best is None or latency < best[0]:
                best = (latency, size)
        if best is None:  # over capacity only on the bound's own cycles; modelled, it is where to measure next
            size = self.bs_max
            own = measured.get(size)
            capacity = size / (own or cycle.cycle_s(size))
            return StreamChoice(size, rate, cycle, None, capacity, over_capacity=own is not None and rate >= capacity,
                                measured_cycle_s=own)
        latency, size = best
        own = measured.get(size)
        return StreamChoice(size, rate, cycle, latency, size / (own or cycle.cycle_s(size)), over_capacity=False,
                            measured_cycle_s=own)


def _fit_times(samples: deque[tuple[int, float]]) -> CycleModel | None:
    """``c * bs**beta`` through (size, seconds) samples (module docstring)."""
    if not samples:
        return None
    sizes = [size for size, _ in samples]
    if len(set(sizes)) >= 2:
        fit = fit_power_law(sizes, [seconds for _, seconds in samples])
        beta = min(1.0, max(0.0, -fit.alpha))
        # refit c with beta fixed (least squares in log space): the mean of log(seconds / bs**beta)
        c = math.exp(statistics.fmean(math.log(seconds / size**beta) for size, seconds in samples))
        return CycleModel(c, beta, fitted=True, floor_s=min(seconds for _, seconds in samples))
    c = statistics.fmean(seconds / size**SHUFFLE_BETA for size, seconds in samples)
    return CycleModel(c, SHUFFLE_BETA, fitted=False, floor_s=min(seconds for _, seconds in samples))


def _measured(samples: deque[tuple[int, float]], batch_size: int, window: int) -> float | None:
    """The median of the size's recent times (the last ``window`` of them), when it has at least two."""
    own = [seconds for size, seconds in samples if size == batch_size][-window:]
    return statistics.median(own) if len(own) >= 2 else None
