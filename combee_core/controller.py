"""Dynamic batch-size controller (Combee paper §3.3; GEPA issue #395).

Model: the per-trace delay ``T(bs) = batch_delay / bs`` (proportional to the delay of a fixed epoch) follows a
power law ``T(bs) = A * bs**(-alpha)``, fitted by least squares in log-log space. Larger batches cut the delay
with diminishing returns; the controller picks the *plateau* batch size where the marginal improvement
``-dT/dbs = alpha * A * bs**(-(alpha+1))`` drops to a threshold ``tau``:

    bs* = (alpha * A / tau) ** (1 / (alpha + 1))                      (:func:`plateau_batch_size_raw`)

In that raw form ``tau`` carries the units of A (seconds per trace per unit of batch size), so a fixed default
would mean different things for different models and clocks. We normalise the delay by its fitted value at a
reference batch size ``ref``: ``T~(bs) = T(bs) / T(ref) = ref**alpha * bs**(-alpha)``, i.e. ``A~ = ref**alpha``.
``tau`` is then a dimensionless fraction ("stop when one more trace per batch improves the delay by less than
tau of the delay at ``ref``"):

    bs* = (alpha * ref**alpha / tau) ** (1 / (alpha + 1))             (:func:`plateau_batch_size`)

With ``ref = 1`` this is ``(alpha / tau) ** (1 / (alpha + 1))``: A cancels, as it must for a choice that should
not depend on the unit of time. Both forms are evaluated in log space and never return NaN/inf.

The default normalises at the chosen size itself (``reference_batch_size=None``): ``tau`` is then a fraction of
the delay the user would pay at bs* ("stop where one more trace per batch cuts the per-trace delay by less than
tau of itself"); the fixed point ``alpha * bs**alpha * bs**(-(alpha+1)) = tau`` is ``bs* = alpha / tau``
(:func:`plateau_batch_size_relative`). Normalising at bs = 1 instead stops where the gain is tau of the delay at
batch size 1, which is still a large fraction of the delay at bs*: with a rollout-dominated round time
(alpha ~ 1) it stops near sqrt(1/tau) ~ 8 while the epoch time keeps falling about as 1/bs.

The result is clamped to [bs_min, bs_max]; ``bs_max`` is the paper's upper bound against quality degradation
(default 100). The delay fitted is what the user waits for (:func:`sample_delay`): in a sync fleet the round time
(version v -> v+1, rollouts included), otherwise the pipeline delay, on the configured clock.

The controller is plain state (no I/O, no clock): the stream stage calls :meth:`BatchSizeController.observe` per
measured batch and :meth:`BatchSizeController.decide` for the next size; :class:`ControllerState` is enough to
rebuild it after a restart.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from combee_core.models import BatchMetrics, ControlDecision
    from combee_core.settings import CombeeSettings

__all__ = [
    "BatchSizeController",
    "ControllerConfig",
    "ControllerState",
    "Decision",
    "PowerLawFit",
    "epoch_delay",
    "fit_power_law",
    "clock_description",
    "explain_decision",
    "plateau_batch_size",
    "plateau_batch_size_raw",
    "plateau_batch_size_relative",
    "sample_delay",
]

Sample = tuple[int, float]
DEFAULT_LADDER: tuple[int, ...] = (3, 10, 30, 100)
"""From GEPA's default 3 (the k = 1 regime, bs <= 3: one aggregator call, no reduce) by factors of ~3 to the upper
bound; four rungs, as each costs a sync fleet a round."""
_MAX_LOG = 700.0  # exp() overflows a float a little above 709


@dataclass(frozen=True)
class PowerLawFit:
    """``T(bs) = A * bs**(-alpha)`` with the coefficient of determination of the log-log fit."""

    A: float
    alpha: float
    r2: float
    n_samples: int


def epoch_delay(batch_size: int, batch_delay_s: float) -> float:
    """Per-trace delay of a batch, ``batch_delay_s / batch_size`` (what the power law models)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return batch_delay_s / batch_size


def fit_power_law(batch_sizes: Sequence[float], delays: Sequence[float]) -> PowerLawFit:
    """Fit ``delay = A * bs**(-alpha)`` by linear regression of log(delay) on log(bs); r² is in log space.

    Raises ValueError for mismatched lengths, non-positive or non-finite values, or fewer than 2 distinct sizes.
    """
    x = np.asarray(batch_sizes, dtype=float)
    y = np.asarray(delays, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"batch_sizes and delays must be 1-D and equally long, got {x.shape} and {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(x > 0) and np.all(y > 0)):
        raise ValueError("a power-law fit needs finite, strictly positive batch sizes and delays")
    if np.unique(x).size < 2:
        raise ValueError(f"a power-law fit needs at least 2 distinct batch sizes, got {np.unique(x).tolist()}")
    log_x, log_y = np.log(x), np.log(y)
    result = stats.linregress(log_x, log_y)
    slope, intercept = float(result.slope), float(result.intercept)
    residual = log_y - (intercept + slope * log_x)
    ss_res = float(np.sum(residual**2))
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    r2 = 1.0 if ss_tot == 0.0 else max(0.0, 1.0 - ss_res / ss_tot)
    return PowerLawFit(A=math.exp(max(-_MAX_LOG, min(intercept, _MAX_LOG))), alpha=-slope, r2=r2, n_samples=int(x.size))


def _plateau_from_log(log_numerator: float, alpha: float) -> float:
    """``exp(log_numerator / (alpha + 1))``, bounded so it stays finite."""
    return math.exp(max(-_MAX_LOG, min(_MAX_LOG, log_numerator / (alpha + 1.0))))


def plateau_batch_size_raw(A: float, alpha: float, tau: float) -> float:
    """Un-normalised plateau ``(alpha*A/tau)**(1/(alpha+1))``: ``tau`` is in delay units per unit of batch size."""
    _check_plateau_args(A, alpha, tau)
    return _plateau_from_log(math.log(alpha) + math.log(A) - math.log(tau), alpha)


def plateau_batch_size(A: float, alpha: float, tau: float, reference_batch_size: float = 1) -> float:
    """Plateau batch size with the delay normalised at ``reference_batch_size`` (``tau`` a fraction).

    ``T~(bs) = T(bs)/T(ref) = ref**alpha * bs**(-alpha)``; solving ``alpha * ref**alpha * bs**(-(alpha+1)) = tau``
    gives ``bs* = (alpha * ref**alpha / tau)**(1/(alpha+1))``, independent of A (kept in the signature so
    callers pass a whole fit and for symmetry with :func:`plateau_batch_size_raw`). Needs alpha > 0.
    """
    _check_plateau_args(A, alpha, tau)
    if not reference_batch_size > 0:
        raise ValueError(f"reference_batch_size must be > 0, got {reference_batch_size}")
    log_numerator = math.log(alpha) + alpha * math.log(reference_batch_size) - math.log(tau)
    return _plateau_from_log(log_numerator, alpha)


def plateau_batch_size_relative(alpha: float, tau: float) -> float:
    """Plateau with the delay normalised at the chosen size itself: ``bs* = alpha / tau``.

    ``-dT/dbs / T(bs) = alpha / bs``: the relative gain of one more trace per batch; it falls to ``tau`` at
    ``alpha / tau``. The paper's formula with ``ref = bs*`` (:func:`plateau_batch_size`) gives the same point.
    """
    _check_plateau_args(1.0, alpha, tau)
    return _plateau_from_log((math.log(alpha) - math.log(tau)) * (alpha + 1.0), alpha)


def _check_plateau_args(A: float, alpha: float, tau: float) -> None:
    if not (math.isfinite(A) and A > 0):
        raise ValueError(f"A must be finite and > 0, got {A}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"the plateau exists only for a falling delay (alpha > 0), got alpha={alpha}")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and > 0, got {tau}")


@dataclass(frozen=True)
class ControllerConfig:
    """Controller tuning.

    ``candidates`` is the profiling ladder (clamped to [bs_min, bs_max], duplicates dropped: see
    :attr:`ladder`); each rung needs ``samples_per_candidate`` samples. ``hysteresis``: a fitted choice replaces
    the current size only if it differs by more than this fraction of it. ``min_r2``: a worse fit keeps the
    current size. ``max_samples``: fits use the most recent samples only. ``reference_batch_size``: where the
    delay is normalised for ``tau`` (None: at bs* itself, so bs* = alpha / tau). ``max_profiling_samples`` (default
    4 x the ladder's budget) ends profiling even if some rung is never hit exactly (e.g. batches closed early by
    ``max_wait_s``), provided 2 distinct sizes were seen.
    """

    tau: float = 0.016
    bs_min: int = 1
    bs_max: int = 100
    candidates: tuple[int, ...] = DEFAULT_LADDER
    samples_per_candidate: int = 1
    hysteresis: float = 0.2
    min_r2: float = 0.5
    max_samples: int = 64
    reference_batch_size: float | None = None
    max_profiling_samples: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tau) and self.tau > 0):
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if not 1 <= self.bs_min <= self.bs_max:
            raise ValueError(f"need 1 <= bs_min <= bs_max, got bs_min={self.bs_min}, bs_max={self.bs_max}")
        if not self.candidates:
            raise ValueError("the profiling ladder (candidates) must not be empty")
        if self.samples_per_candidate < 1:
            raise ValueError(f"samples_per_candidate must be >= 1, got {self.samples_per_candidate}")
        if not 0 <= self.hysteresis < 1:
            raise ValueError(f"hysteresis must be in [0, 1), got {self.hysteresis}")
        if not 0 <= self.min_r2 <= 1:
            raise ValueError(f"min_r2 must be in [0, 1], got {self.min_r2}")
        if self.max_samples < 2:
            raise ValueError(f"max_samples must be >= 2, got {self.max_samples}")
        if self.reference_batch_size is not None and not self.reference_batch_size > 0:
            raise ValueError(f"reference_batch_size must be > 0, got {self.reference_batch_size}")

    @property
    def ladder(self) -> tuple[int, ...]:
        """Profiling ladder clamped to [bs_min, bs_max], first occurrence kept."""
        return tuple(dict.fromkeys(self.clamp(c) for c in self.candidates))

    @property
    def profiling_budget(self) -> int:
        """Observations after which profiling stops even if a rung is still missing samples."""
        if self.max_profiling_samples is not None:
            return self.max_profiling_samples
        return 4 * len(self.ladder) * self.samples_per_candidate

    def clamp(self, batch_size: int) -> int:
        return max(self.bs_min, min(self.bs_max, batch_size))


@dataclass(frozen=True)
class Decision:
    """The controller's choice and why; ``samples`` are the (batch size, batch delay s) pairs behind it."""

    batch_size: int
    phase: Literal["profiling", "fitted"]
    fit: PowerLawFit | None
    reason: str
    samples: tuple[Sample, ...]
    plateau: float | None = None
    """bs* from the fit, before rounding and clamping (None while profiling or without a usable fit)."""


@dataclass(frozen=True)
class ControllerState:
    """What it takes to rebuild a controller: recent samples, the current size, whether profiling finished."""

    samples: tuple[Sample, ...] = ()
    current_batch_size: int | None = None
    profiled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": [[bs, delay] for bs, delay in self.samples],
            "current_batch_size": self.current_batch_size,
            "profiled": self.profiled,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ControllerState:
        return cls(
            samples=tuple((int(bs), float(delay)) for bs, delay in data.get("samples", ())),
            current_batch_size=data.get("current_batch_size"),
            profiled=bool(data.get("profiled", False)),
        )


class BatchSizeController:
    """Profiles the ladder, then fits the power law and picks the plateau batch size (with hysteresis)."""

    def __init__(self, config: ControllerConfig | None = None, current_batch_size: int | None = None) -> None:
        self.config = config or ControllerConfig()
        self.current_batch_size = current_batch_size
        self._samples: deque[Sample] = deque(maxlen=self.config.max_samples)
        self._profiled = False
        self._observed = 0

    # ------------------------------------------------------------------------------------------ state

    @classmethod
    def from_state(cls, state: ControllerState, config: ControllerConfig | None = None) -> BatchSizeController:
        controller = cls(config or ControllerConfig(), current_batch_size=state.current_batch_size)
        controller._samples.extend(state.samples)
        controller._observed = len(controller._samples)
        controller._profiled = state.profiled
        return controller

    def state(self) -> ControllerState:
        return ControllerState(
            samples=tuple(self._samples), current_batch_size=self.current_batch_size, profiled=self._profiled
        )

    @property
    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)

    # ------------------------------------------------------------------------------------------ input

    def observe(self, batch_size: int, batch_delay_s: float) -> None:
        """Record one measured batch: its size and its delay (batch closed -> version published), seconds.

        Zero delays are kept (they count towards profiling) but are left out of fits, which need positive values.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not (math.isfinite(batch_delay_s) and batch_delay_s >= 0):
            raise ValueError(f"batch_delay_s must be finite and >= 0, got {batch_delay_s}")
        self._samples.append((int(batch_size), float(batch_delay_s)))
        self._observed += 1

    # ------------------------------------------------------------------------------------------ decision

    def decide(self) -> Decision:
        """Next batch size: the next unprofiled ladder rung, then the fitted plateau size."""
        config = self.config
        if not self._profiled:
            rung = self._next_rung()
            if rung is not None and self._observed < config.profiling_budget:
                counts = self._rung_counts()
                done = sum(1 for c in config.ladder if counts[c] >= config.samples_per_candidate)
                reason = (
                    f"profiling rung {rung} ({counts[rung]}/{config.samples_per_candidate} samples; "
                    f"{done}/{len(config.ladder)} rungs done)"
                )
                return self._decide(rung, "profiling", None, reason)
            self._profiled = True
        return self._decide_fitted()

    def _decide(self, size: int, phase: Literal["profiling", "fitted"], fit: PowerLawFit | None, reason: str,
                plateau: float | None = None) -> Decision:
        self.current_batch_size = size
        return Decision(batch_size=size, phase=phase, fit=fit, reason=reason, samples=tuple(self._samples),
                        plateau=plateau)

    def _keep(self, fit: PowerLawFit | None, why: str, plateau: float | None = None) -> Decision:
        current = self.current_batch_size if self.current_batch_size is not None else self.config.ladder[-1]
        return self._decide(self.config.clamp(current), "fitted", fit, f"{why}; keeping {current}", plateau)

    def _decide_fitted(self) -> Decision:
        config = self.config
        per_trace = [(bs, epoch_delay(bs, delay)) for bs, delay in self._samples]
        positive = [(bs, delay) for bs, delay in per_trace if delay > 0]
        dropped = len(per_trace) - len(positive)
        note = f" ({dropped} zero-delay samples left out)" if dropped else ""
        if len({bs for bs, _ in positive}) < 2:
            return self._keep(None, f"cannot fit: fewer than 2 distinct batch sizes with positive delay{note}")
        fit = fit_power_law([bs for bs, _ in positive], [delay for _, delay in positive])
        described = f"fitted A={fit.A:.4g}, alpha={fit.alpha:.3f}, r2={fit.r2:.3f} on {fit.n_samples} samples{note}"
        if fit.r2 < config.min_r2:
            return self._keep(fit, f"{described}; r2 below min_r2={config.min_r2}")
        plateau: float | None = None
        if fit.alpha <= 0:
            # The per-trace delay does not fall with batch size: batching buys no throughput, while smaller
            # batches publish playbook versions sooner (fresher, less stale). So the smallest size wins.
            target = config.bs_min
            choice = f"alpha <= 0 (bigger batches do not cut the per-trace delay) -> bs_min={config.bs_min}"
        else:
            if config.reference_batch_size is None:
                plateau = plateau_batch_size_relative(fit.alpha, config.tau)
                formula = f"bs* = alpha/tau = {fit.alpha:.3f}/{config.tau:g}"
            else:
                plateau = plateau_batch_size(fit.A, fit.alpha, config.tau, config.reference_batch_size)
                formula = f"bs* = (alpha*{config.reference_batch_size:g}^alpha/tau)^(1/(alpha+1))"
            rounded = int(math.floor(plateau + 0.5)) if plateau < config.bs_max + 1 else config.bs_max + 1
            target = config.clamp(rounded)
            choice = f"{formula} = {plateau:.1f} -> {target}"
            if target != rounded:
                choice += f" (clamped to [{config.bs_min}, {config.bs_max}]"
                choice += ": the upper bound)" if target == config.bs_max else ")"
        current = self.current_batch_size
        if current is not None and current != target:
            change = abs(target - current) / current
            if change <= config.hysteresis:
                return self._keep(
                    fit, f"{described}; {choice}, within hysteresis ({change:.0%} <= {config.hysteresis:.0%})",
                    plateau,
                )
        return self._decide(target, "fitted", fit, f"{described}; {choice}", plateau)

    # ------------------------------------------------------------------------------------------ profiling

    def _rung_counts(self) -> dict[int, int]:
        """Samples per ladder rung; a sample counts for the rung nearest its size in log space (ties: smaller)."""
        ladder = self.config.ladder
        counts = dict.fromkeys(ladder, 0)
        for bs, _ in self._samples:
            nearest = min(ladder, key=lambda rung: (abs(math.log(bs / rung)), rung))
            counts[nearest] += 1
        return counts

    def _next_rung(self) -> int | None:
        counts = self._rung_counts()
        return next((c for c in self.config.ladder if counts[c] < self.config.samples_per_candidate), None)



# ---------------------------------------------------------------------------------------------- what is fitted


def sample_delay(settings: CombeeSettings, metrics: BatchMetrics) -> float | None:
    """The delay of one batch the controller fits, on the run's clock; None when there is none yet.

    ``settings`` is a ``CombeeSettings``, ``metrics`` a ``BatchMetrics``. Sync fleet (``fleet_mode="sync"``): the
    round time, version v -> v+1, which is what the fleet waits for: modelled, the rollout model's round
    (``ceil(bs / fleet_agents)`` task times) plus the batch's LLM critical path; wall, the time between the two
    versions' publication (``metrics.round_s``; None for the first version a reducer published). Otherwise the
    pipeline delay: the LLM critical path (modelled) or batch closed -> version published (wall).
    """
    from combee_core.rollout import modelled_task_time_s, round_rollout_s

    modelled = settings.controller_clock == "modelled"
    if settings.fleet_mode == "sync":
        if modelled:
            rollout = round_rollout_s(metrics.batch_size, settings.fleet_agents, modelled_task_time_s(settings))
            return rollout + metrics.llm_critical_path_s
        return metrics.round_s
    return metrics.llm_critical_path_s if modelled else metrics.delay_s


def clock_description(settings: CombeeSettings) -> str:
    """One line naming what :func:`sample_delay` measures under ``settings``."""
    if settings.fleet_mode == "sync":
        if settings.controller_clock == "modelled":
            agents = settings.fleet_agents or "one per task"
            return f"round time, modelled (rollouts on {agents} agents + LLM critical path)"
        return "round time, wall (version v -> v+1 published)"
    if settings.controller_clock == "modelled":
        return "pipeline delay, modelled (LLM critical path)"
    return "pipeline delay, wall (batch closed -> version published)"


def explain_decision(decision: ControlDecision) -> str:
    """One line saying what a ``ControlDecision`` chose and why: the clock, the fit, bs*, the bounds."""
    parts = [f"{decision.batch_size} ({decision.phase})"]
    if decision.clock:
        parts.append(f"fitting {decision.clock}")
    if decision.bs_min is not None and decision.bs_max is not None:
        parts.append(f"bounds [{decision.bs_min}, {decision.bs_max}]")
    parts.append(f"tau {decision.tau:g}")
    return "; ".join(parts) + f": {decision.reason}"
