"""Batch-size controller: power-law fit, the plateau's readings, profiling from the top, rollouts in closed form,
hysteresis, state (property tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.control.controller import BatchSizeController, ControllerConfig, ControllerState, epoch_delay
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


def fitted_at(current: int, A: float, alpha: float, tau: float, hysteresis: float = 0.2) -> BatchSizeController:
    """A controller past profiling, currently at ``current``, with exact samples of the given law (no rollouts)."""
    samples = tuple((bs, batch_delay(A, alpha, bs), 0.0) for bs in (5, 10, 20, 40, 80))
    config = ControllerConfig(tau=tau, hysteresis=hysteresis, bs_min=3, bs_max=100)
    return BatchSizeController.from_state(ControllerState(samples, current, profiled=True), config)


def tau_for(target: float, alpha: float) -> float:
    """tau whose tolerance plateau on a power law of ``alpha`` within [3, 100] is exactly ``target``."""
    return (100 / target) ** alpha - 1


@pytest.mark.parametrize(("plateau", "expected"),
                         [(44.0, 40), (37.0, 40), (48.0, 40), (48.5, 49), (32.0, 40), (30.5, 31), (40.0, 40)])
def test_hysteresis_keeps_close_choices(plateau: float, expected: int) -> None:
    decision = fitted_at(40, A=3.0, alpha=0.1, tau=tau_for(plateau, 0.1)).decide()
    assert decision.batch_size == expected
    if expected == 40 and plateau != 40.0:
        assert "within hysteresis" in decision.reason


def test_hysteresis_prevents_flapping_under_noise() -> None:
    rng = np.random.default_rng(7)
    tau = tau_for(40.0, alpha=0.05)

    def trajectory(hysteresis: float) -> list[int]:
        controller = fitted_at(40, A=5.0, alpha=0.05, tau=tau, hysteresis=hysteresis)
        sizes = []
        for _ in range(60):
            decision = controller.decide()
            sizes.append(decision.batch_size)
            controller.observe(decision.batch_size, batch_delay(5.0, 0.05, decision.batch_size, rng.uniform(0.9, 1.1)))
        return sizes

    assert len(set(trajectory(0.0))) > 2  # without hysteresis the noise moves the choice around
    assert set(trajectory(0.2)) == {40}


def test_non_falling_delay_chooses_bs_min() -> None:
    decision = fitted_at(40, A=1.0, alpha=-0.3, tau=0.016).decide()
    assert decision.batch_size == 3 and decision.best == 3 and "lowest within [3, 100] at 3" in decision.reason
    assert decision.fit is not None and decision.fit.alpha < 0


def test_poor_fit_keeps_the_current_size() -> None:
    samples = ((5, 1.0, 0.0), (10, 40.0, 0.0), (20, 1.0, 0.0), (40, 80.0, 0.0), (80, 0.5, 0.0), (5, 30.0, 0.0))
    controller = BatchSizeController.from_state(ControllerState(samples, 20, profiled=True))
    decision = controller.decide()
    assert decision.batch_size == 20 and decision.phase == "fitted"
    assert "below min_r2" in decision.reason


def test_zero_delays_count_for_profiling_but_not_for_the_fit() -> None:
    controller = BatchSizeController(ControllerConfig(**REF1))
    for bs in (80, 40, 20, 10, 5):
        controller.observe(bs, 0.0)
    decision = controller.decide()
    assert decision.phase == "fitted" and "cannot fit" in decision.reason and "5 samples without" in decision.reason


@SETTINGS
@given(
    samples=st.lists(
        st.tuples(st.integers(1, 500), st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
                  st.floats(min_value=0.0, max_value=1.0)), max_size=40
    ),
    current=st.none() | st.integers(1, 200),
    agents=st.none() | st.integers(1, 200),
)
def test_decisions_are_always_valid_sizes(samples: list[tuple[int, float, float]], current: int | None,
                                          agents: int | None) -> None:
    controller = BatchSizeController(ControllerConfig(fleet_agents=agents), current_batch_size=current)
    for bs, delay, rollout_share in samples:
        controller.observe(bs, delay, delay * rollout_share)
    decision = controller.decide()
    assert isinstance(decision.batch_size, int) and 1 <= decision.batch_size <= 100
    if decision.fit is not None:
        assert all(math.isfinite(v) for v in (decision.fit.A, decision.fit.alpha, decision.fit.r2))
    assert "nan" not in decision.reason and "inf" not in decision.reason


def test_observe_rejects_bad_samples() -> None:
    controller = BatchSizeController()
    for bs, delay, rollout in ((0, 1.0, 0.0), (5, -1.0, 0.0), (5, float("nan"), 0.0), (5, float("inf"), 0.0),
                               (5, 1.0, 2.0), (5, 1.0, -0.1)):
        with pytest.raises(ValueError):
            controller.observe(bs, delay, rollout)


def test_sample_window_keeps_the_latest() -> None:
    controller = BatchSizeController(ControllerConfig(max_samples=3))
    for bs in (5, 10, 20, 40):
        controller.observe(bs, 1.0)
    assert controller.samples == ((10, 1.0, 0.0), (20, 1.0, 0.0), (40, 1.0, 0.0))


def test_a_controller_rebuilt_from_its_state_decides_the_same() -> None:
    controller = BatchSizeController(ControllerConfig(fleet_agents=40))
    run_sync_fleet(controller, start=40, rounds=4, agents=40)
    restored = BatchSizeController.from_state(controller.state(), controller.config)
    assert restored.state() == controller.state()
    assert restored.decide() == controller.decide()


@pytest.mark.parametrize(
    "kwargs",
    [{"tau": 0.0}, {"bs_min": 0}, {"bs_min": 10, "bs_max": 5}, {"candidates": ()}, {"hysteresis": 1.0},
     {"min_r2": 2.0}, {"fleet_agents": 0}],
)
def test_config_validation(kwargs) -> None:
    with pytest.raises(ValueError):
        ControllerConfig(**kwargs)


# ------------------------------------------------------------------------------ the paper's form, kept for reference


@SETTINGS
@given(alpha=exponents, tau=taus)
def test_relative_plateau_is_the_paper_formula_normalised_at_its_own_size(alpha: float, tau: float) -> None:
    bs = plateau_batch_size_relative(alpha, tau)
    assert bs == pytest.approx(alpha / tau)
    # the paper's formula with the delay normalised at bs* gives bs* back (a fixed point)
    assert plateau_batch_size(1.0, alpha, tau, reference_batch_size=bs) == pytest.approx(bs, rel=1e-9)


# ---------------------------------------------------------------------------------- what the user waits for


def test_sample_delay_is_the_round_time_in_sync_mode_and_the_pipeline_delay_otherwise() -> None:
    from combee_core.control.delay_model import clock_description, sample_delay, sample_rollout
    from combee_core.models import BatchMetrics
    from combee_core.settings import CombeeSettings

    metrics = BatchMetrics(playbook_id="p", batch_id=1, version=2, batch_size=50, k=7, delay_s=9.0,
                           llm_critical_path_s=12.0, llm_calls=8, round_s=70.0)
    first = metrics.model_copy(update={"round_s": None})

    def settings(**overrides) -> CombeeSettings:
        return CombeeSettings.load(env={}, **overrides)

    sync_modelled = settings(fleet_mode="sync", controller_clock="modelled", fleet_agents=40)
    assert sample_delay(sync_modelled, metrics) == pytest.approx(2 * 38.0 + 12.0)  # two waves of 40 agents
    assert sample_rollout(sync_modelled, metrics, 88.0) == pytest.approx(2 * 38.0)
    assert sample_delay(settings(fleet_mode="sync", controller_clock="modelled"), metrics) == pytest.approx(50.0)
    sync_wall = settings(fleet_mode="sync", controller_clock="wall")
    assert sample_delay(sync_wall, metrics) == 70.0
    assert sample_rollout(sync_wall, metrics, 70.0) == 61.0  # the round less the pipeline's delay
    assert sample_delay(sync_wall, first) is None
    assert sample_delay(settings(fleet_mode="async", controller_clock="modelled"), metrics) == 12.0
    assert sample_delay(settings(fleet_mode="async", controller_clock="wall"), metrics) == 9.0
    assert sample_rollout(settings(fleet_mode="async"), metrics, 9.0) == 0.0
    assert "round time" in clock_description(sync_modelled) and "40 agents" in clock_description(sync_modelled)
    assert "pipeline" in clock_description(settings())


def test_without_a_usable_pipeline_fit_the_known_rollouts_decide() -> None:
    # 40 agents; the rounds' pipeline falls over time (early batches write more), not with the size: profiled from
    # the top, the per-trace pipeline seems to rise with the batch size and the fit is poor
    controller = BatchSizeController(ControllerConfig(fleet_agents=40))
    for bs, pipeline in ((100, 30.0), (80, 4.0), (40, 6.0)):
        rollout = rollout_waves(bs, 40) * TASK_S
        controller.observe(bs, rollout + pipeline, rollout)
        decision = controller.decide()
    assert decision.phase == "fitted" and decision.fit is not None and decision.fit.r2 < 0.5
    assert "pipeline taken as its mean per round" in decision.reason
    # two full waves cost least per trace once the pipeline does not depend on the size
    assert decision.best == 80 and decision.batch_size in (79, 80)
    # without rollouts nothing is known: a poor fit keeps the current size
    blind = BatchSizeController.from_state(
        ControllerState(((100, 30.0, 0.0), (80, 4.0, 0.0), (40, 6.0, 0.0)), 40, profiled=True))
    assert blind.decide().batch_size == 40
