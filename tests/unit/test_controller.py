"""Batch-size controller: power-law fit, the plateau's readings, profiling from the top, rollouts in closed form
(property tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.control.controller import BatchSizeController, ControllerConfig, epoch_delay
from combee_core.control.delay_model import (
    PowerLawFit,
    RoundModel,
    fit_power_law,
    plateau_batch_size,
    plateau_batch_size_raw,
    plateau_batch_size_relative,
    power_law_tolerance_plateau,
    rollout_waves,
    tolerance_plateau,
)
from tests.unit.controller_support import (
    REF1,
    SETTINGS,
    TASK_S,
    WIDE_LADDER,
    analytic_choice,
    coefficients,
    exponents,
    run_profile,
    run_sync_fleet,
    taus,
)

# ---------------------------------------------------------------------------------------------- fit


@SETTINGS
@given(A=coefficients, alpha=exponents)
def test_fit_recovers_exact_power_law(A: float, alpha: float) -> None:
    sizes = [3, 5, 10, 20, 40, 80, 200]
    fit = fit_power_law(sizes, [A * bs ** (-alpha) for bs in sizes])
    assert fit.A == pytest.approx(A, rel=1e-9)
    assert fit.alpha == pytest.approx(alpha, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n_samples == len(sizes)


@SETTINGS
@given(A=coefficients, alpha=exponents, seed=st.integers(0, 2**32 - 1))
def test_fit_recovers_noisy_power_law_within_5_percent(A: float, alpha: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = np.repeat(WIDE_LADDER, 4)
    delays = A * sizes ** (-alpha) * rng.uniform(0.95, 1.05, sizes.size)
    fit = fit_power_law(sizes, delays)
    assert fit.A == pytest.approx(A, rel=0.05)
    assert fit.alpha == pytest.approx(alpha, rel=0.05)
    assert 0.9 < fit.r2 <= 1.0


@pytest.mark.parametrize(
    ("sizes", "delays", "message"),
    [
        ([10], [1.0], "at least 2 distinct"),
        ([10, 10, 10], [1.0, 2.0, 3.0], "at least 2 distinct"),
        ([5, 10], [1.0, 0.0], "strictly positive"),
        ([0, 10], [1.0, 2.0], "strictly positive"),
        ([5, 10], [1.0, float("nan")], "finite"),
        ([5, 10, 20], [1.0, 2.0], "equally long"),
    ],
)
def test_fit_rejects_unusable_samples(sizes, delays, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit_power_law(sizes, delays)


def test_flat_delays_fit_alpha_zero_without_nan() -> None:
    fit = fit_power_law([5, 10, 20], [2.0, 2.0, 2.0])
    assert fit.alpha == pytest.approx(0.0, abs=1e-12) and fit.A == pytest.approx(2.0) and fit.r2 == 1.0


def test_epoch_delay_is_per_trace() -> None:
    assert epoch_delay(10, 5.0) == 0.5
    with pytest.raises(ValueError):
        epoch_delay(0, 1.0)


# ---------------------------------------------------------------------------------------------- plateau formula


@SETTINGS
@given(A=coefficients, alpha=exponents, tau=taus)
def test_raw_plateau_is_where_the_marginal_improvement_equals_tau(A: float, alpha: float, tau: float) -> None:
    bs = plateau_batch_size_raw(A, alpha, tau)
    assert bs == pytest.approx((alpha * A / tau) ** (1 / (alpha + 1)), rel=1e-9)
    assert alpha * A * bs ** (-(alpha + 1)) == pytest.approx(tau, rel=1e-9)  # -dT/dbs at bs*


@SETTINGS
@given(A=coefficients, alpha=exponents, tau=taus, ref=st.floats(min_value=1.0, max_value=50.0))
def test_normalised_plateau(A: float, alpha: float, tau: float, ref: float) -> None:
    bs = plateau_batch_size(A, alpha, tau, reference_batch_size=ref)
    # the marginal improvement of T(bs) / T(ref) equals tau at bs*
    normalised_slope = alpha * A * bs ** (-(alpha + 1)) / (A * ref ** (-alpha))
    assert normalised_slope == pytest.approx(tau, rel=1e-9)
    # same as the raw formula applied to the normalised coefficient A~ = ref**alpha, and independent of A
    assert bs == pytest.approx(plateau_batch_size_raw(ref**alpha, alpha, tau), rel=1e-9)
    assert bs == pytest.approx(plateau_batch_size(2 * A + 1, alpha, tau, reference_batch_size=ref), rel=1e-9)
    # more tolerance (bigger tau) means an earlier plateau
    assert plateau_batch_size(A, alpha, tau * 2, reference_batch_size=ref) < bs


def test_plateau_default_reference_example() -> None:
    # alpha = 1, tau = 1.6%: bs* = sqrt(1 / 0.016) = 7.9
    assert plateau_batch_size(42.0, 1.0, 0.016) == pytest.approx(math.sqrt(62.5))


@pytest.mark.parametrize(("A", "alpha", "tau"),
                         [(1.0, 0.0, 0.016), (1.0, -0.5, 0.016), (0.0, 1.0, 0.016), (1.0, 1.0, 0.0)])
def test_plateau_rejects_degenerate_arguments(A: float, alpha: float, tau: float) -> None:
    with pytest.raises(ValueError):
        plateau_batch_size(A, alpha, tau)
    with pytest.raises(ValueError):
        plateau_batch_size_raw(A, alpha, tau)


def test_plateau_stays_finite_for_extreme_inputs() -> None:
    for value in (plateau_batch_size_raw(1e300, 1e-12, 1e-300), plateau_batch_size(1.0, 1e-300, 1e-300, 1e10)):
        assert math.isfinite(value) and value > 0


# ---------------------------------------------------------------------------------------------- controller


@SETTINGS
@given(A=coefficients, alpha=st.floats(min_value=0.01, max_value=1.5), tau=taus, bs_max=st.integers(2, 300))
def test_tolerance_plateau_of_a_power_law_is_its_closed_form(A: float, alpha: float, tau: float, bs_max: int) -> None:
    chosen, best = tolerance_plateau(lambda bs: A * bs ** (-alpha), 1, bs_max, tau)
    assert best == bs_max  # a falling power law is lowest at the upper bound
    closed = power_law_tolerance_plateau(alpha, tau, bs_max)
    assert chosen == max(1, math.ceil(closed - 1e-9)) or abs(chosen - closed) < 1e-6
    # within tau of the best, and the next smaller size is not (that is what "smallest" means)
    assert A * chosen ** (-alpha) <= (1 + tau) * A * bs_max ** (-alpha) * (1 + 1e-12)
    if chosen > 1:
        assert A * (chosen - 1) ** (-alpha) > (1 + tau) * A * bs_max ** (-alpha) * (1 - 1e-12)


def test_tau_is_read_on_the_curve_not_as_its_reciprocal() -> None:
    # the paper's alpha/tau reading stops at ~56 on any power law of alpha 0.9, however steep the epoch time falls;
    # as a tolerance on T it stops where the curve is within tau of its best within the bounds
    assert plateau_batch_size_relative(0.9, 0.016) == pytest.approx(56.25)
    assert power_law_tolerance_plateau(0.9, 0.016, 100) == pytest.approx(98.25, abs=0.01)
    # a flat curve has a real plateau far below the bound: a smaller batch is as fast (fresher versions)
    assert power_law_tolerance_plateau(0.02, 0.016, 100) == pytest.approx(100 * 1.016 ** -50, rel=1e-9)
    # more tolerance, an earlier plateau
    assert power_law_tolerance_plateau(0.5, 0.05, 100) < power_law_tolerance_plateau(0.5, 0.016, 100)


def test_round_model_adds_the_rollout_waves_to_the_fitted_pipeline() -> None:
    model = RoundModel(task_s=38.0, agents=40, pipeline=PowerLawFit(A=2.0, alpha=0.5, r2=1.0, n_samples=2))
    assert model.per_trace(40) == pytest.approx(38.0 / 40 + 2.0 / math.sqrt(40))
    assert model.per_trace(41) == pytest.approx(2 * 38.0 / 41 + 2.0 / math.sqrt(41))  # a second wave
    # full waves are where rollouts cost least per trace: with 40 agents the lowest delay within 100 is at 80
    assert tolerance_plateau(model.per_trace, 1, 100, 0.016)[1] == 80
    assert "40 agents" in model.describe() and "bs^-0.500" in model.describe()
    rising = RoundModel(task_s=0.0, agents=None, pipeline=PowerLawFit(A=2.0, alpha=-0.25, r2=1.0, n_samples=2))
    assert "bs^+0.250" in rising.describe() and "rollouts" not in rising.describe()
    with pytest.raises(ValueError):
        rollout_waves(0, 40)


# ---------------------------------------------------------------------------------------------- controller


def test_the_ladder_is_profiled_from_the_top() -> None:
    controller = BatchSizeController(ControllerConfig())
    decisions = run_profile(controller, A=10.0, alpha=0.8)
    # without rollouts no rung can be ruled out: from the upper bound down to the k = 1 regime (bs <= 3)
    assert [d.batch_size for d in decisions[:-1]] == [100, 30, 10, 3]
    assert all(d.phase == "profiling" and d.fit is None for d in decisions[:-1])
    assert decisions[-1].phase == "fitted"
    assert "profiling rung 10" in decisions[2].reason


def test_profiling_ladder_repeats_and_clamps() -> None:
    config = ControllerConfig(bs_min=8, bs_max=50, candidates=(5, 10, 20, 40, 80), samples_per_candidate=2)
    assert config.ladder == (50, 40, 20, 10, 8)
    decisions = run_profile(BatchSizeController(config), A=10.0, alpha=0.8)
    assert [d.batch_size for d in decisions[:-1]] == [50, 50, 40, 40, 20, 20, 10, 10, 8, 8]


def test_the_ladder_includes_the_fleets_full_waves() -> None:
    assert ControllerConfig(fleet_agents=40).ladder == (100, 80, 40, 30, 10, 3)
    assert ControllerConfig(fleet_agents=100).ladder == (100, 30, 10, 3)
    assert ControllerConfig(fleet_agents=500).ladder == (100, 30, 10, 3)  # one wave at every size


def test_profiling_counts_a_short_batch_for_its_nearest_rung() -> None:
    controller = BatchSizeController(ControllerConfig(**REF1))
    assert controller.decide().batch_size == 80
    controller.observe(70, 1.0)  # closed early by max_wait
    assert controller.decide().batch_size == 40


def test_profiling_ends_after_its_budget_when_rungs_are_never_hit() -> None:
    config = ControllerConfig(max_profiling_samples=6, **REF1)
    controller = BatchSizeController(config)
    for _ in range(6):
        assert controller.decide().phase == "profiling"
        controller.observe(3, 1.0)  # a trickle: every batch closes at size 3
    decision = controller.decide()
    assert decision.phase == "fitted" and "cannot fit" in decision.reason
    assert decision.batch_size == 80  # keeps the rung it was profiling


def test_rollouts_rule_out_small_rungs_without_running_them() -> None:
    # a sync fleet of 100 agents: after one round at the bound, no smaller rung can win whatever its pipeline
    controller = BatchSizeController(ControllerConfig(fleet_agents=100))
    sizes, decisions = run_sync_fleet(controller, start=100, rounds=5, agents=100)
    assert sizes == [100] * 5
    first = decisions[0]
    assert first.phase == "fitted" and first.batch_size == 100 and first.best == 100
    assert first.task_s == pytest.approx(TASK_S)
    assert "one size can win: 100" in first.reason and "30 (1.27)" in first.reason and "3 (12.7)" in first.reason
    # started lower, it profiles the top once and settles there
    sizes, decisions = run_sync_fleet(BatchSizeController(ControllerConfig(fleet_agents=100)), 40, 5, 100)
    assert sizes == [40, 100, 100, 100, 100] and decisions[-1].batch_size == 100


def test_a_fleet_smaller_than_the_bound_settles_on_full_waves() -> None:
    controller = BatchSizeController(ControllerConfig(fleet_agents=40))
    sizes, decisions = run_sync_fleet(controller, start=40, rounds=6, agents=40)
    # 3 waves at 100 cost more per trace than 2 at 80; the fit of the pipeline finds 80 the lowest, and bs* is the
    # smallest size within tau of it
    assert decisions[-1].best == 80 and sizes[-1] in (79, 80) and decisions[-1].plateau == sizes[-1]
    assert decisions[-1].fit is not None and "ceil(bs/agents)·38 s/bs" in decisions[-1].reason
    assert not any(size in (3, 10) for size in sizes)  # ruled out by their rollouts


def test_cheap_rollouts_and_a_flat_pipeline_give_a_plateau_below_the_bound() -> None:
    # one agent per wave of 10: rollouts per trace no longer fall past 10, the pipeline barely does
    controller = BatchSizeController(ControllerConfig(fleet_agents=10))
    sizes, decisions = run_sync_fleet(controller, start=100, rounds=8, agents=10)
    final = decisions[-1]
    assert final.phase == "fitted" and final.best == 100 and final.batch_size < 100
    assert final.plateau == final.batch_size


@SETTINGS
@given(A=coefficients, alpha=exponents, tau=st.floats(min_value=1e-3, max_value=0.05), seed=st.integers(0, 2**32 - 1))
def test_decision_is_the_tolerance_plateau_of_a_noisy_fit(A: float, alpha: float, tau: float, seed: int) -> None:
    config = ControllerConfig(tau=tau, bs_min=1, bs_max=200, candidates=WIDE_LADDER, samples_per_candidate=4,
                              hysteresis=0.0)
    decision = run_profile(BatchSizeController(config), A, alpha, np.random.default_rng(seed))[-1]
    assert decision.phase == "fitted" and decision.fit is not None
    assert decision.fit.A == pytest.approx(A, rel=0.05)
    assert decision.fit.alpha == pytest.approx(alpha, rel=0.05)
    assert abs(decision.batch_size - analytic_choice(decision.fit, config)) <= 1
    assert config.bs_min <= decision.batch_size <= config.bs_max
    true_choice = analytic_choice(PowerLawFit(A, alpha, 1.0, 0), config)
    assert abs(decision.batch_size - true_choice) <= max(1, 0.05 * true_choice)
    assert f"{decision.fit.alpha:.3f}" in decision.reason and "bs* = smallest within tau" in decision.reason
    assert len(decision.samples) == 4 * len(WIDE_LADDER)
