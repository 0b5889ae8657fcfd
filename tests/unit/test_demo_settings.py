"""`combee demo` settings: demo defaults, then COMBEE_* environment variables, then flags."""

from __future__ import annotations

from streams.cli import build_parser
from streams.cli.demo import DEMO_DEFAULTS, demo_settings_from_args


def _settings(argv: list[str], env: dict[str, str] | None = None):
    return demo_settings_from_args(build_parser().parse_args(["demo", *argv]), env=env or {})


def test_demo_defaults_apply_when_nothing_else_is_set():
    settings = _settings([])
    assert settings.sim_time_scale == DEMO_DEFAULTS["sim_time_scale"]
    assert settings.auto_batch_size is True
    assert settings.controller_clock == "modelled"


def test_environment_beats_demo_defaults_and_flags_beat_environment():
    env = {"COMBEE_SIM_TIME_SCALE": "0.5", "COMBEE_MAX_WAIT_S": "7"}
    settings = _settings(["--max-wait", "3"], env)
    assert settings.sim_time_scale == 0.5
    assert settings.max_wait_s == 3.0


def test_a_fixed_batch_size_turns_the_controller_off_and_model_sets_every_role():
    settings = _settings(["--batch-size", "25", "--model", "combee-sim/other"])
    assert settings.auto_batch_size is False and settings.batch_size == 25
    assert {settings.reflector_model, settings.aggregator_model, settings.reducer_model} == {"combee-sim/other"}
