"""What ``combee status`` says about capacity and backlog, from what the topics hold (pure; docs/operations.md,
"Capacity and overload").

**The capacity model.** A trace costs one reflector call; a worker's reflector takes ``concurrency / latency``
traces/s (:func:`combee_core.control.concurrency.reflector_capacity`), and reflection spreads over workers by partition.
One playbook's versions are made one after the other, a batch per cycle (two batches built at once with the context
lag, the cycle then costed by :mod:`combee_core.control.chain_costs`): ``batch / cycle`` traces/s
(:func:`combee_core.control.concurrency.version_chain_capacity`), whatever the number of workers. A playbook keeps up
when its rate is below both.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.control.backlog import Backlog
from combee_core.control.chain_costs import version_cost
from combee_core.control.concurrency import reflector_capacity, version_chain_capacity

__all__ = ["CapacityModel", "rate_until_now", "recent_rate", "status_backlog", "version_cycles"]


@dataclass(frozen=True)
class CapacityModel:
    """The figures behind a playbook's capacity, as measured from the topics."""

    reflect_latency_s: float | None
    concurrency: int
    concurrency_max: int
    batch_size: int | None
    cycle_s: float | None

    def describe(self) -> str:
        parts = []
        if self.reflect_latency_s:
            start = reflector_capacity(self.concurrency, self.reflect_latency_s)
            ceiling = reflector_capacity(self.concurrency_max, self.reflect_latency_s)
            parts.append(f"reflector {self.reflect_latency_s:.2f} s per call (p50, recent calls): {start:.3g} "
                         f"traces/s per worker at concurrency {self.concurrency}, up to {ceiling:.3g} at the ceiling "
                         f"{self.concurrency_max}")
        if self.batch_size and self.cycle_s:
            parts.append(f"version chain: batch {self.batch_size} every {self.cycle_s:.2f} s (median cycle) = "
                         f"{version_chain_capacity(self.batch_size, self.cycle_s):.3g} traces/s per playbook")
        return "; ".join(parts) or "no calls or versions measured yet"


def recent_rate(times: Sequence[float], counts: Sequence[int] | None = None, min_span_s: float = 0.0) -> float | None:
    """Items per second over ``times`` (ascending seconds; ``counts`` per time, default 1 each): the items after the
    first over the span (None with fewer than two distinct times, or a span shorter than ``min_span_s``)."""
    if len(times) < 2 or times[-1] - times[0] <= max(0.0, min_span_s):
        return None
    items = sum(counts[1:]) if counts is not None else len(times) - 1
    return items / (times[-1] - times[0])


def rate_until_now(times: Sequence[float], now: float, window_s: float) -> float | None:
    """Items per second over the ``window_s`` before ``now`` (``times`` ascending seconds): a stream that stopped
    reads 0, not the rate it had. When ``times`` do not reach back a window (a young stream, or a tail shared with
    faster playbooks), the items after the first over the time since it (None with fewer than two)."""
    if not times:
        return None
    if times[0] <= now - window_s:
        return sum(1 for at in times if now - window_s < at <= now) / window_s
    return (len(times) - 1) / (now - times[0]) if len(times) >= 2 and now > times[0] else None


def version_cycles(published_s: Sequence[float], delays_s: Sequence[float], lag: int = 0) -> list[float]:
    """Each version's cycle, versions in order (:func:`combee_core.control.chain_costs.version_cost`'s period): with
    lag 0, batch closed or previous version out, whichever is later -> published; with the context lag, at least
    half the batch's own time (two batches are built at once)."""
    return [version_cost(published - delay, published, published_s[i - 1],
                         published_s[i - 1 - lag] if i - 1 - lag >= 0 else None, lag).period_s
            for i, (published, delay) in enumerate(zip(published_s, delays_s, strict=False)) if i >= 1]


OUTRUN_MARGIN = 0.1
"""As :class:`combee_core.control.backlog.BacklogMonitor`'s margin: a stream at capacity reads a little over its rate
out."""


def status_backlog(playbook_id: str, lag_traces: int, oldest_sent_s: float | None, now: float,
                   rate_in: float | None, rate_out: float | None, warn_after_s: float, window_s: float) -> Backlog:
    """A playbook's backlog as ``combee status`` sees it (one snapshot: falling behind when the oldest trace waits
    longer than ``warn_after_s``; or longer than ``window_s`` while more comes in than goes out by over
    :data:`OUTRUN_MARGIN`, both rates measured (the caller's :func:`rate_until_now` and :func:`rate_between_versions`,
    over the window up to ``now``))."""
    lag_s = max(0.0, now - oldest_sent_s) if oldest_sent_s is not None and lag_traces else 0.0
    into, out = rate_in or 0.0, rate_out or 0.0
    outrun = (rate_in is not None and rate_out is not None and into > (1 + OUTRUN_MARGIN) * out
              and lag_s > window_s)
    falling = lag_traces > 0 and (lag_s > warn_after_s or outrun)
    catch_up = lag_traces / (out - into) if out > into else (0.0 if lag_traces == 0 else None)
    return Backlog(playbook_id, lag_traces, lag_s, into, out, falling, catch_up)


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
