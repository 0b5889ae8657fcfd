"""How many LLM calls a role keeps in flight against one model: additive increase, multiplicative decrease (AIMD).

A provider does not say how much concurrency it allows; it answers slower, or with 429 (``Retry-After``), or not
at all (timeouts). :class:`ConcurrencyController` is the decision, pure (no clock, no I/O; ``now`` is passed in):

- **Raise while latency holds.** After a window of successful calls (as many as the current limit) made while the
  limit was in use (``in_flight`` at the limit: a role that is not saturated learns nothing about the provider),
  the limit grows if the window's mean latency is within ``latency_tolerance`` x the baseline (the lowest window
  mean seen, so the first window's latency is the reference until a faster one is measured): it doubles until the
  first sign of overload or of rising latency (TCP's slow start: a stream that needs 30 calls in flight gets there
  in a few windows, not dozens), then grows by ``increase``.
- **Ease off when latency does not hold.** A window slower than that shrinks the limit by ``latency_decrease``
  (the provider is queueing our calls: more concurrency would only add latency).
- **Back off on overload.** A rate-limit answer or a timeout multiplies the limit by ``decrease`` (at most once per
  ``backoff_window_s``, so one burst of 429s from calls already in flight counts once) and, with ``Retry-After``,
  holds new calls until then (:attr:`ConcurrencyController.resume_at`).

The limit stays within [``floor``, ``ceiling``] (a property test checks it). The capacity this buys is
:func:`reflector_capacity`: ``limit / latency`` calls per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["AimdConfig", "ConcurrencyController", "reflector_capacity", "version_chain_capacity"]


@dataclass(frozen=True)
class AimdConfig:
    """Tuning of :class:`ConcurrencyController`; ``initial`` is clamped to [floor, ceiling]."""

    initial: int = 8
    floor: int = 1
    ceiling: int = 64
    increase: int = 2
    decrease: float = 0.5
    latency_tolerance: float = 1.5
    latency_decrease: float = 0.9
    backoff_window_s: float = 5.0

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.ceiling:
            raise ValueError(f"need 1 <= floor <= ceiling, got floor={self.floor}, ceiling={self.ceiling}")
        if self.increase < 1:
            raise ValueError(f"increase must be >= 1, got {self.increase}")
        for name in ("decrease", "latency_decrease"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} must be in (0, 1), got {value}")
        if not self.latency_tolerance > 1:
            raise ValueError(f"latency_tolerance must be > 1, got {self.latency_tolerance}")
        if not self.backoff_window_s >= 0:
            raise ValueError(f"backoff_window_s must be >= 0, got {self.backoff_window_s}")


@dataclass
class ConcurrencyController:
    """The current concurrency limit of one (model, role) and the evidence behind it."""

    config: AimdConfig = field(default_factory=AimdConfig)
    limit: int = 0
    baseline_s: float | None = None
    """The lowest mean latency of a window of calls seen (None before the first full window)."""
    resume_at: float = -math.inf
    """No new call before this time (a ``Retry-After``)."""
    last_reason: str = "initial"
    slow_start: bool = True
    """Doubling while latency holds, until the first back-off or ease-off."""
    _window: list[float] = field(default_factory=list)
    _last_backoff: float = -math.inf

    def __post_init__(self) -> None:
        if self.limit == 0:
            self.limit = self.config.initial
        self.limit = self._clamp(self.limit)

    def _clamp(self, value: float) -> int:
        return max(self.config.floor, min(self.config.ceiling, int(value)))

    def on_success(self, latency_s: float, in_flight: int) -> None:
        """A call answered after ``latency_s`` while ``in_flight`` calls (itself included) were running."""
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency_s must be finite and >= 0, got {latency_s}")
        if in_flight < self.limit:  # not saturated: says nothing about what the provider allows
            return
        self._window.append(latency_s)
        if len(self._window) < self.limit:
            return
        mean = sum(self._window) / len(self._window)
        self._window.clear()
        if self.baseline_s is None or mean < self.baseline_s:
            self.baseline_s = mean
        if mean <= self.config.latency_tolerance * self.baseline_s:
            self.limit = self._clamp(self.limit * 2 if self.slow_start else self.limit + self.config.increase)
            self.last_reason = f"latency held ({mean:.3g} s vs baseline {self.baseline_s:.3g} s): raised"
        else:
            self.slow_start = False
            self.limit = self._clamp(self.limit * self.config.latency_decrease)
            self.last_reason = (f"latency rose ({mean:.3g} s > {self.config.latency_tolerance:g} x baseline "
                                f"{self.baseline_s:.3g} s): eased off")

    def on_overload(self, now: float, reason: str, retry_after_s: float | None = None) -> bool:
        """A rate-limit answer or a timeout at ``now``; True if it lowered the limit (once per backoff window)."""
        if retry_after_s is not None and math.isfinite(retry_after_s) and retry_after_s > 0:
            self.resume_at = max(self.resume_at, now + retry_after_s)
        self._window.clear()
        if now - self._last_backoff < self.config.backoff_window_s:
            return False
        self._last_backoff = now
        self.slow_start = False
        before = self.limit
        self.limit = self._clamp(self.limit * self.config.decrease)
        self.last_reason = f"{reason}: backed off {before} -> {self.limit}"
        return self.limit < before

    def wait_s(self, now: float) -> float:
        """Seconds a new call must wait for a ``Retry-After`` (0 when none holds)."""
        return max(0.0, self.resume_at - now)


def reflector_capacity(concurrency: int, latency_s: float) -> float:
    """Traces per second one worker's reflector can reflect on: ``concurrency / latency`` (one call per trace)."""
    if concurrency < 1 or not latency_s > 0:
        raise ValueError(f"need concurrency >= 1 and latency_s > 0, got {concurrency}, {latency_s}")
    return concurrency / latency_s


def version_chain_capacity(batch_size: int, cycle_s: float) -> float:
    """Traces per second one playbook's versions can take: a batch per cycle (aggregate + reduce), in order."""
    if batch_size < 1 or not cycle_s > 0:
        raise ValueError(f"need batch_size >= 1 and cycle_s > 0, got {batch_size}, {cycle_s}")
    return batch_size / cycle_s
