"""Shared fixtures of the controller tests: power-law delays, the profiling loop, a sync fleet."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from combee_core.control.controller import BatchSizeController, ControllerConfig, ControllerState
from combee_core.control.delay_model import PowerLawFit, power_law_tolerance_plateau, rollout_waves

SETTINGS = settings(max_examples=60, deadline=None)

coefficients = st.floats(min_value=1.0, max_value=100.0)
exponents = st.floats(min_value=0.3, max_value=1.5)
taus = st.floats(min_value=1e-4, max_value=0.5)

# a wide ladder with repeats so a 5% noise cannot move the fit by 5% (about 6 standard errors away)
WIDE_LADDER = tuple(sorted({round(x) for x in np.geomspace(1, 200, 12)}))
# The ladder and bounds these mechanics tests were written for (no rollouts: every rung is profiled).
REF1 = dict(bs_min=3, bs_max=200, candidates=(5, 10, 20, 40, 80))
TASK_S = 38.0  # one wave of rollouts, the rollout model's task time (docs/simulator.md)


def batch_delay(A: float, alpha: float, batch_size: int, noise: float = 1.0) -> float:
    """Batch delay whose per-trace delay is A * bs**(-alpha), times a multiplicative noise."""
    return A * batch_size ** (1 - alpha) * noise


def analytic_choice(fit: PowerLawFit, config: ControllerConfig) -> int:
    """The smallest integer size within tau of the fitted power law's value at the upper bound."""
    return max(config.bs_min, math.ceil(power_law_tolerance_plateau(fit.alpha, config.tau, config.bs_max) - 1e-9))


def run_profile(controller: BatchSizeController, A: float, alpha: float, rng: np.random.Generator | None = None):
    """Follow the controller's own profiling decisions, feeding it measured delays, until it has fitted."""
    decisions = []
    for _ in range(1000):
        decision = controller.decide()
        decisions.append(decision)
        if decision.phase == "fitted":
            return decisions
        noise = 1.0 if rng is None else rng.uniform(0.95, 1.05)
        controller.observe(decision.batch_size, batch_delay(A, alpha, decision.batch_size, noise))
    raise AssertionError("profiling never ended")


def sync_round(bs: int, agents: int | None, task_s: float = TASK_S, per_call_s: float = 3.0) -> tuple[float, float]:
    """(round time, its rollouts): ceil(bs / agents) waves of rollouts, then a pipeline that grows as sqrt(bs)."""
    rollout = rollout_waves(bs, agents) * task_s
    return rollout + per_call_s * (1 + math.sqrt(bs)), rollout


def run_sync_fleet(controller: BatchSizeController, start: int, rounds: int, agents: int | None,
                   task_s: float = TASK_S) -> tuple[list[int], list]:
    """A sync fleet: each round at the current size, its round time observed, then the controller's next size."""
    sizes, decisions, size = [], [], start
    for _ in range(rounds):
        sizes.append(size)
        controller.observe(size, *sync_round(size, agents, task_s))
        decisions.append(controller.decide())
        size = decisions[-1].batch_size
    return sizes, decisions




def fitted_at(current: int, A: float, alpha: float, tau: float, hysteresis: float = 0.2) -> BatchSizeController:
    """A controller past profiling, currently at ``current``, with exact samples of the given law (no rollouts)."""
    samples = tuple((bs, batch_delay(A, alpha, bs), 0.0) for bs in (5, 10, 20, 40, 80))
    config = ControllerConfig(tau=tau, hysteresis=hysteresis, bs_min=3, bs_max=100)
    return BatchSizeController.from_state(ControllerState(samples, current, profiled=True), config)


def tau_for(target: float, alpha: float) -> float:
    """tau whose tolerance plateau on a power law of ``alpha`` within [3, 100] is exactly ``target``."""
    return (100 / target) ** alpha - 1
