"""The controller's decisions, driven without a broker (``combee_core.control.processor``)."""

from __future__ import annotations

from datetime import UTC, datetime

from combee_core.control.processor import Controller
from combee_core.models import BatchMetrics, ControlDecision
from combee_core.processors.effects import Acknowledge
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _settings(**values: object) -> CombeeSettings:
    return CombeeSettings.load(
        env={}, **{"auto_batch_size": True, "fleet_mode": "async", "controller_objective": "delay", **values})


def _metrics(batch_id: int, batch_size: int, delay_s: float = 10.0) -> BatchMetrics:
    return BatchMetrics(playbook_id="pb", batch_id=batch_id, version=batch_id + 1, batch_size=batch_size, k=1,
                        delay_s=delay_s, llm_critical_path_s=delay_s, llm_calls=1)


def test_the_first_sample_starts_profiling_with_decision_0_and_each_metric_is_acknowledged():
    controller, log = Controller(_settings()), EffectLog()
    effects = log.extend(controller.take(_metrics(0, 40), "m0", NOW))
    [decision] = log.published("control")
    assert isinstance(decision, ControlDecision)
    assert (decision.decision_id, decision.phase, decision.playbook_id) == (0, "profiling", "pb")
    assert decision.batch_size == controller.config.ladder[0] and decision.decided_at == NOW
    assert effects[-1] == Acknowledge(("m0",)) and log.counts()["decisions"] == 1


def test_a_redelivered_metric_is_not_a_second_sample_and_an_unchanged_size_is_not_a_decision():
    controller, log = Controller(_settings()), EffectLog()
    log.extend(controller.take(_metrics(0, 40), "m0", NOW))
    samples = len(controller.controller("pb").decide().samples)
    assert log.extend(controller.take(_metrics(0, 40), "m0-again", NOW)) == [Acknowledge(("m0-again",))]
    assert len(controller.controller("pb").decide().samples) == samples
    assert len(log.published("control")) == 1


def test_decision_ids_continue_those_on_the_control_log_and_fixed_mode_only_observes():
    controller, log = Controller(_settings()), EffectLog()
    restored = ControlDecision(playbook_id="pb", decision_id=6, batch_size=7, phase="fitted", tau=0.1, reason="x",
                               decided_at=NOW)
    controller.restore_decision(restored)
    controller.restore_decision(restored.model_copy(update={"decision_id": 2, "batch_size": 99}))  # older: void
    log.extend(controller.take(_metrics(0, 40), "m0", NOW))
    assert [d.decision_id for d in log.published("control")] == [7]  # type: ignore[attr-defined]

    fixed, quiet = Controller(_settings(auto_batch_size=False)), EffectLog()
    quiet.extend(fixed.take(_metrics(0, 40), "m0", NOW))
    assert quiet.published() == [] and quiet.acknowledged() == ["m0"]
    assert fixed.controller("pb").decide().samples  # the sample was recorded all the same
