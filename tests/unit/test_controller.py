"""Batch-size controller: power-law fit, plateau formula, profiling ladder, hysteresis, state (property tests)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.controller import (
    BatchSizeController,
    ControllerConfig,
    ControllerState,
    PowerLawFit,
    epoch_delay,
    fit_power_law,
    plateau_batch_size,
    plateau_batch_size_raw,
    plateau_batch_size_relative,
)

SETTINGS = settings(max_examples=60, deadline=None)

coefficients = st.floats(min_value=1.0, max_value=100.0)
exponents = st.floats(min_value=0.3, max_value=1.5)
taus = st.floats(min_value=1e-4, max_value=0.5)

# a wide ladder with repeats so a 5% noise cannot move the fit by 5% (about 6 standard errors away)
WIDE_LADDER = tuple(sorted({round(x) for x in np.geomspace(1, 200, 12)}))
# The bs = 1-normalised form of the plateau, with the ladder and bounds these mechanics tests were written for.
REF1 = dict(bs_min=3, bs_max=200, candidates=(5, 10, 20, 40, 80), reference_batch_size=1.0)


def batch_delay(A: float, alpha: float, batch_size: int, noise: float = 1.0) -> float:
    """Batch delay whose per-trace delay is A * bs**(-alpha), times a multiplicative noise."""
    return A * batch_size ** (1 - alpha) * noise


def analytic_choice(fit: PowerLawFit, config: ControllerConfig) -> int:
    plateau = plateau_batch_size(fit.A, fit.alpha, config.tau, config.reference_batch_size)
    return config.clamp(math.floor(plateau + 0.5))


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


def test_profiling_ladder_is_visited_in_order() -> None:
    controller = BatchSizeController(ControllerConfig())
    decisions = run_profile(controller, A=10.0, alpha=0.8)
    # the default ladder starts in the k = 1 regime (bs <= 3) and ends at the upper bound
    assert [d.batch_size for d in decisions[:-1]] == [3, 10, 30, 100]
    assert all(d.phase == "profiling" and d.fit is None for d in decisions[:-1])
    assert decisions[-1].phase == "fitted"
    assert "profiling rung 30" in decisions[2].reason


def test_profiling_ladder_repeats_and_clamps() -> None:
    config = ControllerConfig(bs_min=8, bs_max=50, candidates=(5, 10, 20, 40, 80), samples_per_candidate=2)
    assert config.ladder == (8, 10, 20, 40, 50)
    decisions = run_profile(BatchSizeController(config), A=10.0, alpha=0.8)
    assert [d.batch_size for d in decisions[:-1]] == [8, 8, 10, 10, 20, 20, 40, 40, 50, 50]


def test_profiling_counts_a_short_batch_for_its_nearest_rung() -> None:
    controller = BatchSizeController(ControllerConfig(**REF1))
    assert controller.decide().batch_size == 5
    controller.observe(4, 1.0)  # closed early by max_wait
    assert controller.decide().batch_size == 10


def test_profiling_ends_after_its_budget_when_rungs_are_never_hit() -> None:
    config = ControllerConfig(max_profiling_samples=6, **REF1)
    controller = BatchSizeController(config)
    for _ in range(6):
        assert controller.decide().phase == "profiling"
        controller.observe(2, 1.0)  # a trickle: every batch closes at size 2
    decision = controller.decide()
    assert decision.phase == "fitted" and "cannot fit" in decision.reason
    assert decision.batch_size == 10  # keeps the rung it was profiling


@SETTINGS
@given(A=coefficients, alpha=exponents, tau=st.floats(min_value=1e-3, max_value=0.05), seed=st.integers(0, 2**32 - 1))
def test_decision_is_the_analytic_plateau_of_a_noisy_fit(A: float, alpha: float, tau: float, seed: int) -> None:
    config = ControllerConfig(
        tau=tau, bs_min=1, bs_max=200, candidates=WIDE_LADDER, samples_per_candidate=4, hysteresis=0.0,
        reference_batch_size=1.0,
    )
    decision = run_profile(BatchSizeController(config), A, alpha, np.random.default_rng(seed))[-1]
    assert decision.phase == "fitted" and decision.fit is not None
    assert decision.fit.A == pytest.approx(A, rel=0.05)
    assert decision.fit.alpha == pytest.approx(alpha, rel=0.05)
    assert decision.batch_size == analytic_choice(decision.fit, config)
    assert config.bs_min <= decision.batch_size <= config.bs_max
    true_choice = config.clamp(math.floor(plateau_batch_size(A, alpha, tau) + 0.5))
    assert abs(decision.batch_size - true_choice) <= max(1, 0.05 * true_choice)
    assert f"alpha={decision.fit.alpha:.3f}" in decision.reason and "bs* = " in decision.reason
    assert len(decision.samples) == 4 * len(WIDE_LADDER)


def test_clamping_is_reported() -> None:
    config = ControllerConfig(tau=1e-6, bs_max=100, hysteresis=0.0)  # plateau far above bs_max
    decision = run_profile(BatchSizeController(config), A=10.0, alpha=1.0)[-1]
    assert decision.batch_size == 100
    assert "clamped to [1, 100]: the upper bound" in decision.reason
    assert decision.plateau is not None and decision.plateau > 100


def fitted_at(current: int, A: float, alpha: float, tau: float, hysteresis: float = 0.2) -> BatchSizeController:
    """A controller past profiling, currently at ``current``, with exact samples of the given law."""
    samples = tuple((bs, batch_delay(A, alpha, bs)) for bs in (5, 10, 20, 40, 80))
    config = ControllerConfig(tau=tau, hysteresis=hysteresis, bs_min=3, bs_max=200, reference_batch_size=1.0)
    return BatchSizeController.from_state(ControllerState(samples, current, profiled=True), config)


def tau_for(target: float, alpha: float = 1.0) -> float:
    """tau whose plateau (reference 1) is exactly ``target``."""
    return alpha * target ** (-(alpha + 1))


@pytest.mark.parametrize(("plateau", "expected"),
                         [(44.0, 40), (37.0, 40), (48.0, 40), (49.0, 49), (32.0, 40), (31.0, 31), (40.0, 40)])
def test_hysteresis_keeps_close_choices(plateau: float, expected: int) -> None:
    decision = fitted_at(40, A=3.0, alpha=1.0, tau=tau_for(plateau)).decide()
    assert decision.batch_size == expected
    if expected == 40 and plateau != 40.0:
        assert "within hysteresis" in decision.reason


def test_hysteresis_prevents_flapping_under_noise() -> None:
    rng = np.random.default_rng(7)
    tau = tau_for(40.0, alpha=0.7)

    def trajectory(hysteresis: float) -> list[int]:
        controller = fitted_at(40, A=5.0, alpha=0.7, tau=tau, hysteresis=hysteresis)
        sizes = []
        for _ in range(60):
            decision = controller.decide()
            sizes.append(decision.batch_size)
            controller.observe(decision.batch_size, batch_delay(5.0, 0.7, decision.batch_size, rng.uniform(0.8, 1.2)))
        return sizes

    assert len(set(trajectory(0.0))) > 2  # without hysteresis the noise moves the choice around
    assert set(trajectory(0.2)) == {40}


def test_non_falling_delay_chooses_bs_min() -> None:
    controller = fitted_at(40, A=1.0, alpha=-0.3, tau=0.016)
    decision = controller.decide()
    assert decision.batch_size == 3 and "alpha <= 0" in decision.reason
    assert decision.fit is not None and decision.fit.alpha < 0


def test_poor_fit_keeps_the_current_size() -> None:
    samples = ((5, 1.0), (10, 40.0), (20, 1.0), (40, 80.0), (80, 0.5), (5, 30.0))
    controller = BatchSizeController.from_state(ControllerState(samples, 20, profiled=True))
    decision = controller.decide()
    assert decision.batch_size == 20 and decision.phase == "fitted"
    assert "below min_r2" in decision.reason


def test_zero_delays_count_for_profiling_but_not_for_the_fit() -> None:
    controller = BatchSizeController(ControllerConfig(**REF1))
    for bs in (5, 10, 20, 40, 80):
        controller.observe(bs, 0.0)
    decision = controller.decide()
    assert decision.phase == "fitted" and "cannot fit" in decision.reason and "5 zero-delay" in decision.reason


@SETTINGS
@given(
    samples=st.lists(
        st.tuples(st.integers(1, 500), st.floats(min_value=0.0, max_value=1e6, allow_nan=False)), max_size=40
    ),
    current=st.none() | st.integers(1, 200),
)
def test_decisions_are_always_valid_sizes(samples: list[tuple[int, float]], current: int | None) -> None:
    controller = BatchSizeController(ControllerConfig(), current_batch_size=current)
    for bs, delay in samples:
        controller.observe(bs, delay)
    decision = controller.decide()
    assert isinstance(decision.batch_size, int) and 1 <= decision.batch_size <= 100
    if decision.fit is not None:
        assert all(math.isfinite(v) for v in (decision.fit.A, decision.fit.alpha, decision.fit.r2))
    assert "nan" not in decision.reason and "inf" not in decision.reason


def test_observe_rejects_bad_samples() -> None:
    controller = BatchSizeController()
    for bs, delay in ((0, 1.0), (5, -1.0), (5, float("nan")), (5, float("inf"))):
        with pytest.raises(ValueError):
            controller.observe(bs, delay)


def test_sample_window_keeps_the_latest() -> None:
    controller = BatchSizeController(ControllerConfig(max_samples=3))
    for bs in (5, 10, 20, 40):
        controller.observe(bs, 1.0)
    assert controller.samples == ((10, 1.0), (20, 1.0), (40, 1.0))


def test_state_round_trips_through_json() -> None:
    controller = BatchSizeController()
    run_profile(controller, A=7.0, alpha=0.9)
    restored = BatchSizeController.from_state(
        ControllerState.from_dict(json.loads(json.dumps(controller.state().to_dict()))), controller.config
    )
    assert restored.state() == controller.state()
    assert restored.decide() == controller.decide()


@pytest.mark.parametrize(
    "kwargs",
    [{"tau": 0.0}, {"bs_min": 0}, {"bs_min": 10, "bs_max": 5}, {"candidates": ()}, {"hysteresis": 1.0},
     {"min_r2": 2.0}],
)
def test_config_validation(kwargs) -> None:
    with pytest.raises(ValueError):
        ControllerConfig(**kwargs)


# ---------------------------------------------------------------------------------- defaults: what the user waits for


@SETTINGS
@given(alpha=exponents, tau=taus)
def test_relative_plateau_is_the_paper_formula_normalised_at_its_own_size(alpha: float, tau: float) -> None:
    bs = plateau_batch_size_relative(alpha, tau)
    assert bs == pytest.approx(alpha / tau)
    # the paper's formula with the delay normalised at bs* gives bs* back (a fixed point)
    assert plateau_batch_size(1.0, alpha, tau, reference_batch_size=bs) == pytest.approx(bs, rel=1e-9)


def sync_round_delay(bs: int, rollout_s: float = 38.0, per_call_s: float = 3.0) -> float:
    """A sync round: the rollout wave plus a pipeline that grows slowly with the batch."""
    return rollout_s + per_call_s * (1 + math.sqrt(bs))


def test_rollout_dominated_rounds_choose_a_large_batch_bounded_by_the_upper_bound() -> None:
    controller = BatchSizeController(ControllerConfig())
    decision = controller.decide()
    while decision.phase == "profiling":
        controller.observe(decision.batch_size, sync_round_delay(decision.batch_size))
        decision = controller.decide()
    assert decision.fit is not None and decision.fit.alpha > 0.8  # epoch time falls almost as 1/bs
    assert decision.batch_size == round(decision.fit.alpha / 0.016)
    assert 50 <= decision.batch_size <= 100
    bounded = BatchSizeController(ControllerConfig(bs_max=40))
    decision = bounded.decide()
    while decision.phase == "profiling":
        bounded.observe(decision.batch_size, sync_round_delay(decision.batch_size))
        decision = bounded.decide()
    assert decision.batch_size == 40 and "the upper bound" in decision.reason


def test_sample_delay_is_the_round_time_in_sync_mode_and_the_pipeline_delay_otherwise() -> None:
    from combee_core.controller import clock_description, sample_delay
    from combee_core.models import BatchMetrics
    from combee_core.settings import CombeeSettings

    metrics = BatchMetrics(playbook_id="p", batch_id=1, version=2, batch_size=50, k=7, delay_s=9.0,
                           llm_critical_path_s=12.0, llm_calls=8, round_s=70.0)
    first = metrics.model_copy(update={"round_s": None})

    def settings(**overrides) -> CombeeSettings:
        return CombeeSettings.load(env={}, **overrides)

    sync_modelled = settings(fleet_mode="sync", controller_clock="modelled", fleet_agents=40)
    assert sample_delay(sync_modelled, metrics) == pytest.approx(2 * 38.0 + 12.0)  # two waves of 40 agents
    assert sample_delay(settings(fleet_mode="sync", controller_clock="modelled"), metrics) == pytest.approx(50.0)
    assert sample_delay(settings(fleet_mode="sync", controller_clock="wall"), metrics) == 70.0
    assert sample_delay(settings(fleet_mode="sync", controller_clock="wall"), first) is None
    assert sample_delay(settings(fleet_mode="async", controller_clock="modelled"), metrics) == 12.0
    assert sample_delay(settings(fleet_mode="async", controller_clock="wall"), metrics) == 9.0
    assert "round time" in clock_description(sync_modelled) and "40 agents" in clock_description(sync_modelled)
    assert "pipeline" in clock_description(settings())

