"""The delay the batch-size controller models, and how it reads the threshold tau (Combee paper §3.3).

What a user waits for per trace at batch size ``bs`` (proportional to the time of a fixed epoch):

    T(bs) = (waves(bs) * task_s + P(bs)) / bs                               (:class:`RoundModel`)

In a sync fleet a round runs ``bs`` tasks on ``agents`` parallel agents, ``waves(bs) = ceil(bs / agents)`` task times
of ``task_s`` each (one wave when every task has its own agent), then waits for the batch's pipeline ``P(bs)``
(reflection and LLM critical path). The rollout part is known in closed form once one round has been measured;
only the pipeline part needs fitting, and it gets the paper's power law ``P(bs) / bs = A * bs**(-alpha)``
(:func:`fit_power_law`, least squares in log-log space). Without rollouts (async fleets, the pipeline clock),
``T`` is the paper's model as it stands.

**Reading tau.** The paper picks the plateau where the marginal improvement ``-dT/dbs`` falls below ``tau``,
``bs* = (alpha*A/tau)**(1/(alpha+1))`` (:func:`plateau_batch_size_raw`), with ``tau = 1.6%``: a fraction, so ``T``
must be normalised, and the paper does not say by what. Normalised at bs = 1 it stops near ``sqrt(1/tau) ~ 8``
for a rollout-dominated round (:func:`plateau_batch_size`); normalised at bs* itself it stops at ``alpha/tau``
(:func:`plateau_batch_size_relative`), ~56 for ``alpha ~ 0.9``, whatever the curve's shape: a power law is
scale-free, the relative gain of one more trace per batch is ``alpha/bs`` on *every* power law, so ``alpha/tau`` is
the reciprocal of tau, not a feature of T, and the epoch time can still fall by a third past it. The controller
therefore reads tau as the plateau's tolerance on T itself (:func:`tolerance_plateau`): **bs* is the smallest
batch size whose modelled per-trace delay is within tau of the lowest the bounds allow**, i.e. beyond bs* every
larger batch (up to the upper bound) gains less than tau of the delay. On a power law that is
``bs_max * (1 + tau)**(-1/alpha)`` (:func:`power_law_tolerance_plateau`): near the bound for a steep curve, far
below it for a flat one (alpha = 0.02: ~45 of 100), where batching no longer buys delay and a smaller batch
publishes fresher versions at less quality risk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from combee_core.models import BatchMetrics
    from combee_core.settings import CombeeSettings

__all__ = [
    "PowerLawFit",
    "RoundModel",
    "clock_description",
    "fit_power_law",
    "plateau_batch_size",
    "plateau_batch_size_raw",
    "plateau_batch_size_relative",
    "power_law_tolerance_plateau",
    "rollout_waves",
    "sample_delay",
    "sample_rollout",
    "tolerance_plateau",
]

_MAX_LOG = 700.0  # exp() overflows a float a little above 709


@dataclass(frozen=True)
class PowerLawFit:
    """``T(bs) = A * bs**(-alpha)`` with the coefficient of determination of the log-log fit."""

    A: float
    alpha: float
    r2: float
    n_samples: int


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
    from scipy import stats  # here, not at import: scipy.stats costs ~0.5 s of CPU every CLI command would pay

    result = stats.linregress(log_x, log_y)
    slope, intercept = float(result.slope), float(result.intercept)
    residual = log_y - (intercept + slope * log_x)
    ss_res = float(np.sum(residual**2))
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    r2 = 1.0 if ss_tot == 0.0 else max(0.0, 1.0 - ss_res / ss_tot)
    return PowerLawFit(A=math.exp(max(-_MAX_LOG, min(intercept, _MAX_LOG))), alpha=-slope, r2=r2, n_samples=int(x.size))


# ---------------------------------------------------------------------------------------------- the round model


def rollout_waves(batch_size: int, agents: int | None) -> int:
    """Waves of rollouts a round of ``batch_size`` tasks takes on ``agents`` agents (None: one agent per task)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if agents is not None and agents < 1:
        raise ValueError(f"agents must be >= 1, got {agents}")
    return 1 if agents is None else math.ceil(batch_size / agents)


@dataclass(frozen=True)
class RoundModel:
    """``T(bs) = (waves(bs) * task_s + bs * A * bs**(-alpha)) / bs``: rollouts in closed form + the fitted pipeline.

    ``task_s`` is 0 without rollouts (then T is the pipeline's power law alone); ``pipeline`` is the fit of the
    per-trace pipeline delay.
    """

    task_s: float
    agents: int | None
    pipeline: PowerLawFit

    def rollout_per_trace(self, batch_size: int) -> float:
        return rollout_waves(batch_size, self.agents) * self.task_s / batch_size

    def pipeline_per_trace(self, batch_size: int) -> float:
        log_value = math.log(self.pipeline.A) - self.pipeline.alpha * math.log(batch_size)
        return math.exp(max(-_MAX_LOG, min(_MAX_LOG, log_value)))

    def per_trace(self, batch_size: int) -> float:
        return self.rollout_per_trace(batch_size) + self.pipeline_per_trace(batch_size)

    def describe(self) -> str:
        fit = self.pipeline
        pipeline = f"pipeline {fit.A:.4g}·bs^{-fit.alpha:+.3f} s/trace (r2={fit.r2:.3f}, {fit.n_samples} samples)"
        if self.task_s <= 0:
            return f"T(bs) = {pipeline}"
        agents = f"{self.agents} agents" if self.agents is not None else "one agent per task"
        return f"T(bs) = ceil(bs/agents)·{self.task_s:.4g} s/bs (rollouts, {agents}) + {pipeline}"


def tolerance_plateau(per_trace: Callable[[int], float], bs_min: int, bs_max: int, tau: float) -> tuple[int, int]:
    """``(bs*, best)``: ``best`` minimises ``per_trace`` over the integers of [bs_min, bs_max] (the smallest if
    several do), ``bs*`` is the smallest size there whose delay is within ``tau`` of it:
    ``per_trace(bs*) <= (1 + tau) * per_trace(best)``."""
    if not 1 <= bs_min <= bs_max:
        raise ValueError(f"need 1 <= bs_min <= bs_max, got bs_min={bs_min}, bs_max={bs_max}")
    if not (math.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be finite and >= 0, got {tau}")
    values = [(size, per_trace(size)) for size in range(bs_min, bs_max + 1)]
    best, lowest = min(values, key=lambda item: (item[1], item[0]))
    # a size exactly on the boundary counts as within it, whatever the rounding of its power (1e-12 relative)
    chosen = next(size for size, value in values if value <= (1.0 + tau) * lowest * (1.0 + 1e-12))
    return chosen, best


def power_law_tolerance_plateau(alpha: float, tau: float, bs_max: float) -> float:
    """Where a falling power law comes within ``tau`` of its value at ``bs_max``: ``bs_max * (1+tau)**(-1/alpha)``.

    The continuous form of :func:`tolerance_plateau` for ``T = A * bs**(-alpha)``, alpha > 0 (A cancels)."""
    _check_plateau_args(1.0, alpha, tau)
    return float(bs_max * math.exp(max(-_MAX_LOG, -math.log1p(tau) / alpha)))


# ---------------------------------------------------------------------------------------------- the paper's form


def _plateau_from_log(log_numerator: float, alpha: float) -> float:
    """``exp(log_numerator / (alpha + 1))``, bounded so it stays finite."""
    return math.exp(max(-_MAX_LOG, min(_MAX_LOG, log_numerator / (alpha + 1.0))))


def plateau_batch_size_raw(A: float, alpha: float, tau: float) -> float:
    """The paper's plateau ``(alpha*A/tau)**(1/(alpha+1))``, where ``-dT/dbs = tau`` (tau in T's units per trace)."""
    _check_plateau_args(A, alpha, tau)
    return _plateau_from_log(math.log(alpha) + math.log(A) - math.log(tau), alpha)


def plateau_batch_size(A: float, alpha: float, tau: float, reference_batch_size: float = 1) -> float:
    """The paper's plateau with T normalised at ``reference_batch_size`` (``tau`` a fraction of ``T(ref)``).

    ``T~(bs) = T(bs)/T(ref) = ref**alpha * bs**(-alpha)``; solving ``alpha * ref**alpha * bs**(-(alpha+1)) = tau``
    gives ``bs* = (alpha * ref**alpha / tau)**(1/(alpha+1))``, independent of A. Needs alpha > 0.
    """
    _check_plateau_args(A, alpha, tau)
    if not reference_batch_size > 0:
        raise ValueError(f"reference_batch_size must be > 0, got {reference_batch_size}")
    log_numerator = math.log(alpha) + alpha * math.log(reference_batch_size) - math.log(tau)
    return _plateau_from_log(log_numerator, alpha)


def plateau_batch_size_relative(alpha: float, tau: float) -> float:
    """The paper's plateau normalised at the chosen size itself: ``bs* = alpha / tau`` (its fixed point)."""
    _check_plateau_args(1.0, alpha, tau)
    return _plateau_from_log((math.log(alpha) - math.log(tau)) * (alpha + 1.0), alpha)


def _check_plateau_args(A: float, alpha: float, tau: float) -> None:
    if not (math.isfinite(A) and A > 0):
        raise ValueError(f"A must be finite and > 0, got {A}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"the plateau exists only for a falling delay (alpha > 0), got alpha={alpha}")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and > 0, got {tau}")


# ---------------------------------------------------------------------------------------------- what is fitted


def sample_delay(settings: CombeeSettings, metrics: BatchMetrics) -> float | None:
    """The delay of one batch the controller fits, on the run's clock; None when there is none yet.

    Sync fleet (``fleet_mode="sync"``): the round time, version v -> v+1, which is what the fleet waits for:
    modelled, the rollout model's round (``ceil(bs / fleet_agents)`` task times) plus the batch's LLM critical path;
    wall, the time between the two versions' publication (``metrics.round_s``; None for the first version a reducer
    published). Otherwise the pipeline delay: the LLM critical path (modelled) or batch closed -> version published.
    """
    from combee_core.control.rollout import modelled_task_time_s, round_rollout_s

    modelled = settings.controller_clock == "modelled"
    if settings.fleet_mode == "sync":
        if modelled:
            rollout = round_rollout_s(metrics.batch_size, settings.fleet_agents, modelled_task_time_s(settings))
            return rollout + metrics.llm_critical_path_s
        return metrics.round_s
    return metrics.llm_critical_path_s if modelled else metrics.delay_s


def sample_rollout(settings: CombeeSettings, metrics: BatchMetrics, delay_s: float) -> float:
    """The part of :func:`sample_delay`'s ``delay_s`` that is the fleet's rollouts (0 outside a sync fleet).

    Modelled: the rollout model's round; wall: the round time less the pipeline's (batch closed -> version
    published), i.e. the fleet's share of the round, rollouts and batching.
    """
    from combee_core.control.rollout import modelled_task_time_s, round_rollout_s

    if settings.fleet_mode != "sync":
        return 0.0
    if settings.controller_clock == "modelled":
        rollout = round_rollout_s(metrics.batch_size, settings.fleet_agents, modelled_task_time_s(settings))
    else:
        rollout = delay_s - metrics.delay_s
    return min(delay_s, max(0.0, rollout))


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
