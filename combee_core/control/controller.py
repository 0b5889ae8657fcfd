"""Dynamic batch-size controller (Combee paper §3.3; GEPA issue #395): profile, fit, pick the plateau, bound it.

Per measured batch the stage calls :meth:`BatchSizeController.observe` with the batch's size, the delay the user
waits for (:func:`sample_delay`: in a sync fleet the round time, version v -> v+1, rollouts included; otherwise the
pipeline delay, on the configured clock) and the rollout part of it (:func:`sample_rollout`), then
:meth:`BatchSizeController.decide` for the next size:

1. **Profile from the top.** The ladder (:attr:`ControllerConfig.ladder`: the paper-style candidates 3, 10, 30, 100,
   plus the fleet's size and its largest multiple within the bound, where rollouts come in full waves) is profiled
   from the largest rung down: the largest is the most productive round when rollouts dominate, and once it is
   measured a smaller rung whose rollouts *alone* cost more per trace than ``(1 + tau)`` x the best delay measured
   cannot be the choice whatever its pipeline, so it is skipped rather than run (in a sync fleet of 100 agents
   every rung below ~86 is). Every profiling round is a learning round: its traces make a version like any other.
2. **Fit what is unknown.** The rollout part of a round is known in closed form (``ceil(bs / agents)`` task times,
   the task time measured); the pipeline part gets the paper's power law, fitted on the per-trace pipeline delay
   (:mod:`combee_core.control.delay_model`).
3. **Read tau as the plateau's tolerance.** bs* is the smallest size whose modelled per-trace delay is within tau of
   the lowest the bounds [bs_min, bs_max] allow (:func:`combee_core.control.delay_model.tolerance_plateau`; why not the
   paper's ``alpha/tau`` reading: that module's docstring). ``bs_max`` is the paper's upper bound against quality
   degradation (default 100). With one size measured and every other rung ruled out by its rollouts, that size is
   the choice. A pipeline fit below ``min_r2`` is replaced by the pipeline's mean per round, whatever the size, when
   the rollouts are known (they then decide), else keeps the current size. Hysteresis keeps the current size when
   the choice moves by at most 20%.

The controller is plain state (no I/O, no clock); :class:`ControllerState` is enough to rebuild it after a restart.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from combee_core.control.delay_model import PowerLawFit, RoundModel, fit_power_law, rollout_waves, tolerance_plateau

if TYPE_CHECKING:
    from combee_core.models import ControlDecision

__all__ = [
    "BatchSizeController",
    "ControllerConfig",
    "ControllerState",
    "Decision",
    "epoch_delay",
    "explain_decision",
]

Sample = tuple[int, float, float]
"""(batch size, delay s, the rollout part of that delay s)."""
DEFAULT_LADDER: tuple[int, ...] = (100, 30, 10, 3)
"""From the upper bound down by factors of ~3 to GEPA's default 3 (the k = 1 regime: one aggregator call, no
reduce); profiled from the top, a rung only when it could still be the choice."""


def epoch_delay(batch_size: int, batch_delay_s: float) -> float:
    """Per-trace delay of a batch, ``batch_delay_s / batch_size`` (proportional to a fixed epoch's time)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return batch_delay_s / batch_size


@dataclass(frozen=True)
class ControllerConfig:
    """Controller tuning.

    ``candidates`` plus the fleet's wave sizes make the profiling ladder (:attr:`ladder`); each rung needs
    ``samples_per_candidate`` samples unless its rollouts rule it out. ``fleet_agents``: parallel agents of a sync
    fleet (None: one agent per task, a round is one wave). ``hysteresis``: a fitted choice replaces the current size
    only if it differs by more than this fraction of it. ``min_r2``: below it the pipeline's fit is not used
    (module docstring, step 3).
    ``max_samples``: fits use the most recent samples only. ``max_profiling_samples`` (default 4 x the ladder's
    budget) ends profiling even if some rung is never hit (e.g. batches closed early by ``max_wait_s``).
    """

    tau: float = 0.016
    bs_min: int = 1
    bs_max: int = 100
    candidates: tuple[int, ...] = DEFAULT_LADDER
    samples_per_candidate: int = 1
    hysteresis: float = 0.2
    min_r2: float = 0.5
    max_samples: int = 64
    max_profiling_samples: int | None = None
    fleet_agents: int | None = None

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
        if self.fleet_agents is not None and self.fleet_agents < 1:
            raise ValueError(f"fleet_agents must be >= 1, got {self.fleet_agents}")

    @property
    def ladder(self) -> tuple[int, ...]:
        """Profiling ladder, largest first: the candidates and, with a known fleet, its size and its largest
        multiple within the bound (the sizes whose rounds are full waves), clamped to [bs_min, bs_max]."""
        rungs = {self.clamp(c) for c in self.candidates}
        if self.fleet_agents is not None and self.fleet_agents <= self.bs_max:
            rungs |= {self.clamp(self.fleet_agents), self.clamp(self.bs_max // self.fleet_agents * self.fleet_agents)}
        return tuple(sorted(rungs, reverse=True))

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
    """The controller's choice and why; ``samples`` are the (size, delay s, rollout s) triples behind it."""

    batch_size: int
    phase: Literal["profiling", "fitted"]
    fit: PowerLawFit | None
    reason: str
    samples: tuple[Sample, ...]
    plateau: float | None = None
    """bs*, the smallest size within tau of the best (None while profiling or without a usable fit)."""
    best: int | None = None
    """The size with the lowest modelled (or, without a fit, measured) per-trace delay within the bounds."""
    task_s: float | None = None
    """One wave of rollouts, seconds, as measured (None without rollouts)."""


@dataclass(frozen=True)
class ControllerState:
    """What it takes to rebuild a controller: recent samples, the current size, whether profiling finished."""

    samples: tuple[Sample, ...] = ()
    current_batch_size: int | None = None
    profiled: bool = False


class BatchSizeController:
    """Profiles the ladder from the top, fits the round model, picks the plateau within the bounds (hysteresis)."""

    def __init__(self, config: ControllerConfig | None = None, current_batch_size: int | None = None) -> None:
        self.config = config or ControllerConfig()
        self.current_batch_size = current_batch_size
        self._samples: deque[Sample] = deque(maxlen=self.config.max_samples)
        self._profiled = False
        self._observed = 0

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

    def observe(self, batch_size: int, batch_delay_s: float, rollout_s: float = 0.0) -> None:
        """Record one measured batch: its size, its delay in seconds and the part of it that was rollouts.

        Zero delays are kept (they count towards profiling) but are left out of fits, which need positive values.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not (math.isfinite(batch_delay_s) and batch_delay_s >= 0):
            raise ValueError(f"batch_delay_s must be finite and >= 0, got {batch_delay_s}")
        if not (math.isfinite(rollout_s) and 0 <= rollout_s <= batch_delay_s):
            raise ValueError(f"rollout_s must be finite and within [0, batch_delay_s], got {rollout_s}")
        self._samples.append((int(batch_size), float(batch_delay_s), float(rollout_s)))
        self._observed += 1

    # ------------------------------------------------------------------------------------------ decision

    def decide(self) -> Decision:
        """Next batch size: the next rung that could still win, then the plateau of the fitted round model."""
        config = self.config
        if not self._profiled:
            rung, ruled_out = self._next_rung()
            if rung is not None and self._observed < config.profiling_budget:
                counts = self._rung_counts()
                reason = f"profiling rung {rung} ({counts[rung]}/{config.samples_per_candidate} samples)"
                return self._decide(rung, "profiling", None, reason + self._ruled_out_note(ruled_out))
            self._profiled = True
        return self._decide_fitted()

    def _decide(self, size: int, phase: Literal["profiling", "fitted"], fit: PowerLawFit | None, reason: str,
                plateau: float | None = None, best: int | None = None) -> Decision:
        self.current_batch_size = size
        return Decision(batch_size=size, phase=phase, fit=fit, reason=reason, samples=tuple(self._samples),
                        plateau=plateau, best=best, task_s=self._task_s())

    def _keep(self, fit: PowerLawFit | None, why: str, plateau: float | None = None,
              best: int | None = None) -> Decision:
        current = self.current_batch_size if self.current_batch_size is not None else self.config.ladder[0]
        return self._decide(self.config.clamp(current), "fitted", fit, f"{why}; keeping {current}", plateau, best)

    def _decide_fitted(self) -> Decision:
        config = self.config
        per_trace = [(bs, (delay - rollout) / bs) for bs, delay, rollout in self._samples]
        pipeline = [(bs, delay) for bs, delay in per_trace if delay > 0]
        dropped = len(self._samples) - len(pipeline)
        note = f" ({dropped} samples without a positive pipeline delay left out)" if dropped else ""
        if len({bs for bs, _ in pipeline}) < 2:
            measured = self._measured()
            _, ruled_out = self._next_rung()
            if measured and set(ruled_out) | self._covered() >= set(config.ladder):
                best = min(measured, key=lambda bs: (measured[bs], bs))
                reason = (f"one size can win: {best} at {measured[best]:.4g} s/trace measured"
                          f"{self._ruled_out_note(ruled_out)}")
                if config.clamp(best) != best:
                    reason += f" (clamped to [{config.bs_min}, {config.bs_max}])"
                return self._hysteresis(config.clamp(best), None, reason, None, config.clamp(best))
            return self._keep(None, f"cannot fit the pipeline: fewer than 2 distinct batch sizes{note}")
        fit = fit_power_law([bs for bs, _ in pipeline], [delay for _, delay in pipeline])
        model = RoundModel(task_s=self._task_s() or 0.0, agents=config.fleet_agents, pipeline=fit)
        described = f"{model.describe()}{note}"
        if fit.r2 < config.min_r2:
            if not model.task_s:
                return self._keep(fit, f"{described}; r2 below min_r2={config.min_r2}")
            # The rollouts are known; the pipeline is not, so take it as its mean per round, whatever the size.
            rounds = [delay - rollout for _, delay, rollout in self._samples]
            mean = max(statistics.fmean(rounds), 1e-9)
            model = RoundModel(task_s=model.task_s, agents=model.agents, pipeline=PowerLawFit(mean, 1.0, fit.r2, 0))
            described += (f"; r2 below min_r2={config.min_r2}: pipeline taken as its mean per round, {mean:.4g} s, "
                          f"whatever the size")
        chosen, best = tolerance_plateau(model.per_trace, config.bs_min, config.bs_max, config.tau)
        choice = (f"lowest within [{config.bs_min}, {config.bs_max}] at {best} ({model.per_trace(best):.4g} s/trace); "
                  f"bs* = smallest within tau={config.tau:g} of it = {chosen} ({model.per_trace(chosen):.4g} s/trace)")
        return self._hysteresis(chosen, fit, f"{described}; {choice}", float(chosen), best)

    def _hysteresis(self, target: int, fit: PowerLawFit | None, why: str, plateau: float | None,
                    best: int | None) -> Decision:
        current = self.current_batch_size
        if current is not None and current != target:
            change = abs(target - current) / current
            if change <= self.config.hysteresis:
                return self._keep(fit, f"{why}, within hysteresis ({change:.0%} <= {self.config.hysteresis:.0%})",
                                  plateau, best)
        return self._decide(target, "fitted", fit, why, plateau, best)

    # ------------------------------------------------------------------------------------------ profiling

    def _task_s(self) -> float | None:
        """Seconds of one wave of rollouts, the mean over the samples that had rollouts (None: none had)."""
        agents = self.config.fleet_agents
        waves = [rollout / rollout_waves(bs, agents) for bs, _, rollout in self._samples if rollout > 0]
        return statistics.fmean(waves) if waves else None

    def _measured(self) -> dict[int, float]:
        """Mean per-trace delay of each batch size measured with a positive delay."""
        by_size: dict[int, list[float]] = {}
        for bs, delay, _ in self._samples:
            if delay > 0:
                by_size.setdefault(bs, []).append(delay / bs)
        return {bs: statistics.fmean(values) for bs, values in by_size.items()}

    def _rung_counts(self) -> dict[int, int]:
        """Samples per ladder rung; a sample counts for the rung nearest its size in log space (ties: smaller)."""
        ladder = self.config.ladder
        counts = dict.fromkeys(ladder, 0)
        for bs, _, _ in self._samples:
            nearest = min(ladder, key=lambda rung: (abs(math.log(bs / rung)), rung))
            counts[nearest] += 1
        return counts

    def _covered(self) -> set[int]:
        return {rung for rung, n in self._rung_counts().items() if n >= self.config.samples_per_candidate}

    def _next_rung(self) -> tuple[int | None, dict[int, float]]:
        """The largest rung still to profile that could win, and the rungs ruled out (-> their rollouts' s/trace):
        a rung whose rollouts alone exceed ``(1 + tau)`` x the best per-trace delay measured so far."""
        task_s, measured = self._task_s(), self._measured()
        bar = (1 + self.config.tau) * min(measured.values()) if measured else None
        covered, ruled_out = self._covered(), dict[int, float]()
        for rung in self.config.ladder:
            if rung in covered:
                continue
            floor = rollout_waves(rung, self.config.fleet_agents) * task_s / rung if task_s else 0.0
            if bar is not None and floor > bar:
                ruled_out[rung] = floor
                continue
            return rung, ruled_out
        return None, ruled_out

    def _ruled_out_note(self, ruled_out: dict[int, float]) -> str:
        if not ruled_out:
            return ""
        measured = self._measured()
        best = min(measured, key=lambda bs: (measured[bs], bs))
        rungs = ", ".join(f"{rung} ({floor:.3g})" for rung, floor in ruled_out.items())
        return (f"; not profiled, as their rollouts alone cost more s/trace than (1+tau) x the best measured "
                f"({best}: {measured[best]:.4g}): {rungs}")


# ---------------------------------------------------------------------------------------------- explanation


def explain_decision(decision: ControlDecision) -> str:
    """One line saying what a ``ControlDecision`` chose and why: the clock, the fit, bs*, the bounds."""
    parts = [f"{decision.batch_size} ({decision.phase})"]
    if decision.clock:
        parts.append(f"fitting {decision.clock}")
    if decision.bs_min is not None and decision.bs_max is not None:
        parts.append(f"bounds [{decision.bs_min}, {decision.bs_max}]")
    if not (decision.clock or "").startswith("streaming"):  # the streaming objective does not use tau
        parts.append(f"tau {decision.tau:g} (bs* = the smallest size within tau of the lowest delay in the bounds)")
    if decision.best_batch_size is not None:
        parts.append(f"lowest at {decision.best_batch_size}")
    if decision.rollout_task_s is not None:
        agents = f"{decision.fleet_agents} agents" if decision.fleet_agents else "one agent per task"
        parts.append(f"rollouts {decision.rollout_task_s:.3g} s per wave on {agents}")
    return "; ".join(parts) + f": {decision.reason}"
