"""The rollout model: a task's time is its agent calls at the simulator's latency; a round waits for its waves."""

import pytest

from combee_core.control.rollout import RolloutModel, modelled_task_time_s, round_rollout_s
from combee_core.llm.simulator import SimulatorConfig
from combee_core.settings import CombeeSettings


def test_task_time_is_the_calls_at_the_simulators_latency():
    model = RolloutModel(calls_per_task=10, prompt_tokens_per_call=2000, completion_tokens_per_call=150)
    assert model.task_time_s() == pytest.approx(10 * (0.4 + 2000 * 0.0002 + 150 * 0.02))
    slower = SimulatorConfig(per_completion_token_s=0.04)
    assert model.task_time_s(slower) == pytest.approx(10 * (0.4 + 0.4 + 150 * 0.04))
    assert RolloutModel(calls_per_task=0).task_time_s() == 0.0


def test_a_round_takes_one_task_time_per_wave_of_agents():
    assert round_rollout_s(100, None, 38.0) == 38.0  # one agent per task
    assert round_rollout_s(40, 40, 38.0) == 38.0
    assert round_rollout_s(41, 40, 38.0) == 76.0
    assert round_rollout_s(100, 40, 38.0) == 114.0
    assert round_rollout_s(0, 40, 38.0) == 0.0
    with pytest.raises(ValueError):
        round_rollout_s(3, 0, 1.0)


def test_settings_choose_the_model_and_the_time_scale_applies():
    settings = CombeeSettings.load(env={"COMBEE_ROLLOUT_CALLS_PER_TASK": "1"}, sim_time_scale=0.5)
    assert modelled_task_time_s(settings) == pytest.approx(0.5 * (0.4 + 0.4 + 3.0))
