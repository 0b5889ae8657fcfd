"""Batch-size controller after profiling: hysteresis, poor fits, valid sizes, state, the round the user waits for."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.control.controller import BatchSizeController, ControllerConfig, ControllerState
from combee_core.control.delay_model import plateau_batch_size, plateau_batch_size_relative, rollout_waves
from tests.unit.controller_support import (
    REF1,
    SETTINGS,
    TASK_S,
    batch_delay,
    exponents,
    fitted_at,
    run_sync_fleet,
    tau_for,
    taus,
)


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
