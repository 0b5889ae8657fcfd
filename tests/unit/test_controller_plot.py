"""The demo's controller plot shows the controller's own fit and choice, with readable ticks (issue 20)."""

from __future__ import annotations

from datetime import datetime, timezone

from combee_core.models import BatchMetrics, ControlDecision, DelaySample
from combee_core.settings import CombeeSettings
from streams.demo.plots import controller_plot_skipped, delay_ticks, plain_number, plot_controller
from streams.demo.results import ControllerSummary, controller_summary

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _metrics(batch_id: int, size: int, delay: float) -> BatchMetrics:
    return BatchMetrics(playbook_id="pb", batch_id=batch_id, version=batch_id + 1, batch_size=size, k=1,
                        delay_s=delay, llm_critical_path_s=delay, llm_calls=1)


def _decision(decision_id: int, size: int, phase: str, reason: str, **fit) -> ControlDecision:
    return ControlDecision(playbook_id="pb", decision_id=decision_id, batch_size=size, phase=phase, tau=0.02,
                           samples=[DelaySample(batch_size=40, delay_s=0.4), DelaySample(batch_size=5, delay_s=0.1)],
                           reason=reason, decided_at=NOW, **fit)


def test_the_summary_takes_the_fit_tau_and_reason_from_the_controllers_last_decision_not_a_refit():
    settings = CombeeSettings.load(env={}, controller_clock="wall", auto_batch_size=True, controller_tau=0.5)
    metrics = [_metrics(0, 40, 0.4), _metrics(1, 5, 0.1), _metrics(2, 10, 0.3)]  # a refit would differ
    decisions = [_decision(0, 5, "profiling", "profiling rung 5"),
                 _decision(1, 12, "fitted", "fitted A=0.03; bs*=12.2 -> 12", fit_A=0.03, fit_alpha=0.7, r2=0.9)]
    summary = controller_summary(settings, metrics, decisions, "pb")
    assert (summary.fit_A, summary.fit_alpha, summary.fit_r2, summary.tau) == (0.03, 0.7, 0.9, 0.02)
    assert summary.last_reason == "fitted A=0.03; bs*=12.2 -> 12" and summary.last_phase == "fitted"
    assert summary.chosen_batch_sizes == [5, 12]
    assert [s.batch_size for s in summary.samples] == [40, 5, 10]
    assert [(s.batch_size, s.per_trace_delay_s) for s in summary.fit_samples] == [(40, 0.01), (5, 0.02)]


def test_without_decisions_there_is_no_controller_plot_and_the_reason_is_given(tmp_path):
    fixed = ControllerSummary(clock="wall", auto=False, samples=[], chosen_batch_sizes=[], tau=0.016)
    assert plot_controller(fixed, tmp_path / "c.png") is None and not (tmp_path / "c.png").exists()
    assert "fixed" in controller_plot_skipped(fixed) and "off" in controller_plot_skipped(fixed)
    silent = fixed.model_copy(update={"auto": True})
    assert "no decision" in controller_plot_skipped(silent)


def test_the_plot_is_written_with_the_controllers_choice(tmp_path):
    settings = CombeeSettings.load(env={}, controller_clock="wall", auto_batch_size=True)
    decisions = [_decision(0, 12, "fitted", "fitted; bs*=12.2 -> 12", fit_A=0.03, fit_alpha=0.7, r2=0.9)]
    summary = controller_summary(settings, [_metrics(0, 40, 0.4), _metrics(1, 5, 0.1)], decisions, "pb")
    path = plot_controller(summary, tmp_path / "c.png")
    assert path is not None and path.read_bytes()[:8] == PNG_MAGIC


def test_ticks_are_plain_numbers_several_per_decade():
    assert [plain_number(v) for v in (5, 40, 0.25, 0.0012)] == ["5", "40", "0.25", "0.0012"]
    ticks = delay_ticks([0.004, 0.03])
    assert ticks == [0.005, 0.01, 0.02]
    assert all("e" not in plain_number(t) for t in ticks)


def test_a_sync_fleets_controller_shows_round_times_with_rollouts(tmp_path):
    settings = CombeeSettings.load(env={}, controller_clock="modelled", auto_batch_size=True, fleet_mode="sync",
                                   fleet_agents=40)
    reason = "T(bs) = ceil(bs/agents)·38 s/bs + pipeline ...; lowest within [1, 100] at 80; bs* = ... = 79"
    decisions = [_decision(0, 79, "fitted", reason, fit_A=0.4, fit_alpha=0.5, r2=0.99).model_copy(update={
        "clock": "round time, modelled", "plateau_batch_size": 79.0, "bs_min": 1, "bs_max": 100,
        "best_batch_size": 80, "rollout_task_s": 38.0, "fleet_agents": 40})]
    summary = controller_summary(settings, [_metrics(0, 40, 3.0), _metrics(1, 100, 20.0)], decisions, "pb")
    # every sample is a whole round: the rollout model's waves of 38 s on 40 agents plus the LLM critical path
    assert [s.batch_delay_s for s in summary.samples] == [41.0, 3 * 38.0 + 20.0]
    assert summary.clock_description == "round time, modelled" and summary.bs_max == 100
    assert (summary.plateau_batch_size, summary.best_batch_size) == (79.0, 80)
    assert (summary.rollout_task_s, summary.fleet_agents) == (38.0, 40)
    assert plot_controller(summary, tmp_path / "c.png") is not None
    # a choice made without a fit (every smaller rung ruled out by its rollouts) is still drawn
    alone = summary.model_copy(update={"fit_A": None, "fit_alpha": None, "chosen_batch_sizes": [100]})
    assert plot_controller(alone, tmp_path / "alone.png") is not None


def test_size_ticks_that_would_overlap_are_thinned_keeping_the_choice():
    from streams.demo.plots import spaced_ticks

    assert spaced_ticks([3, 10, 19, 40, 44, 100], keep=44) == [3, 10, 19, 44, 100]
    assert spaced_ticks([3, 10, 30, 100]) == [3, 10, 30, 100]
