"""``combee status``'s dead-letter breakdown and guard state, and ``combee worker``'s ready line (issues 20, 26)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from combee_core.models import DeadLetter, LiveTest, PromotionDecision
from combee_core.settings import CombeeSettings
from streams.topology.health import WorkerReadiness, announce_ready, ready_line
from streams.topology.observe import (
    DeadLetterKind,
    RunStatus,
    dead_letter_breakdown,
    format_status,
    guard_state,
    read_dead_letter,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _letter(stage: str, error_type: str, reason: str) -> DeadLetter:
    return DeadLetter(stage=stage, reason=reason, error_type=error_type, original_size=1, occurred_at=NOW)


def test_dead_letters_are_grouped_by_stage_and_reason_class_most_frequent_first_with_the_first_reason():
    letters = [_letter("reflect", "TraceRejected", "invalid JSON: x"),
               _letter("aggregate", "LLMError", "timeout"),
               _letter("reflect", "TraceRejected", "schema: missing trace_id"),
               _letter("reflect", "LLMError", "rate limited")]
    assert dead_letter_breakdown(letters) == [
        DeadLetterKind("reflect", "TraceRejected", 2, "invalid JSON: x"),
        DeadLetterKind("aggregate", "LLMError", 1, "timeout"),
        DeadLetterKind("reflect", "LLMError", 1, "rate limited"),
    ]


def test_status_shows_each_kind_of_dead_letter_with_a_short_example():
    kinds = [DeadLetterKind("reflect", "TraceRejected", 3, "invalid JSON:\n  " + "x" * 300)]
    report = format_status(RunStatus(dead_letters=3, dead_letter_kinds=kinds))
    lines = report.splitlines()
    at = lines.index("dead letters: 3")
    assert lines[at + 1].split() == ["reflect", "TraceRejected", "3"]
    assert lines[at + 2].strip().startswith("e.g. invalid JSON: xxx") and lines[at + 2].endswith("…")
    assert len(lines[at + 2]) < 120


def test_a_record_on_the_dlq_that_is_not_a_dead_letter_is_counted_as_unreadable():
    letter = read_dead_letter(b"garbage")
    assert (letter.stage, letter.error_type) == ("?", "UnreadableDeadLetter")


class _Stage:
    def __init__(self, name: str) -> None:
        self.name = name
        self.started = asyncio.Event()


async def test_the_worker_says_once_that_it_is_ready_when_every_stage_consumes():
    stages = [_Stage("reflect"), _Stage("batch")]
    forever = asyncio.create_task(asyncio.Event().wait())
    readiness = WorkerReadiness()
    readiness.watch(stages, [forever, forever])
    lines: list[str] = []
    announcer = asyncio.create_task(announce_ready(readiness, asyncio.Event(), lines.append))
    stages[0].started.set()
    await asyncio.sleep(0.5)
    assert lines == []  # batch has not joined its group yet
    stages[1].started.set()
    await asyncio.wait_for(announcer, 5)
    assert lines == ["worker: ready (reflect, batch)"]
    forever.cancel()


async def test_while_the_broker_does_not_answer_no_stage_reads_as_consuming():
    from types import SimpleNamespace

    from streams.topology.metrics import WorkerMetrics

    stages = [_Stage("reflect"), _Stage("batch")]
    for stage in stages:
        stage.started.set()
        stage.assigned = set()  # type: ignore[attr-defined]
        stage.consumer = None  # type: ignore[attr-defined]
        stage.ctx = SimpleNamespace(counters={})  # type: ignore[attr-defined]
    forever = asyncio.create_task(asyncio.Event().wait())
    broker = SimpleNamespace(unreachable_since=None)
    readiness = WorkerReadiness(broker=broker)  # type: ignore[arg-type]
    readiness.watch(stages, [forever, forever])  # type: ignore[arg-type]
    metrics = WorkerMetrics(readiness)
    assert readiness.report() == (True, {"reflect": "consuming", "batch": "consuming"})
    assert 'combee_stage_up{stage="reflect"} 1.0' in (await metrics.render()).decode()
    broker.unreachable_since = 1.0
    assert readiness.report() == (False, {"reflect": "waiting for the broker", "batch": "waiting for the broker",
                                          "broker": "unreachable"})
    assert 'combee_stage_up{stage="reflect"} 0.0' in (await metrics.render()).decode()
    forever.cancel()


async def test_a_worker_stopped_before_it_was_ready_says_nothing():
    stop = asyncio.Event()
    stop.set()
    lines: list[str] = []
    await asyncio.wait_for(announce_ready(WorkerReadiness(), stop, lines.append), 5)
    assert lines == []
    assert ready_line({"reflect": "consuming", "broker": "unreachable"}) == "worker: ready (reflect)"


def test_status_explains_the_controllers_latest_decision():
    from combee_core.control.controller import explain_decision
    from combee_core.models import ControlDecision, utc_now

    decision = ControlDecision(
        playbook_id="pb", decision_id=4, batch_size=79, phase="fitted", fit_A=0.4, fit_alpha=0.5, r2=0.99,
        tau=0.016, reason="T(bs) = ceil(bs/agents)·38 s/bs (rollouts, 40 agents) + pipeline 0.4·bs^-0.500 s/trace; "
        "lowest within [1, 100] at 80 (1.0 s/trace); bs* = smallest within tau=0.016 of it = 79 (1.01 s/trace)",
        decided_at=utc_now(), clock="round time, modelled (rollouts on 40 agents + LLM critical path)",
        plateau_batch_size=79.0, bs_min=1, bs_max=100, best_batch_size=80, rollout_task_s=38.0, fleet_agents=40)
    line = explain_decision(decision)
    assert line.startswith("79 (fitted)") and "round time" in line and "[1, 100]" in line and "tau 0.016" in line
    assert "lowest at 80" in line and "rollouts 38 s per wave on 40 agents" in line and "= 79" in line
    report = format_status(RunStatus(versions={"pb": 9}, batch_sizes={"pb": "79 (fitted)"}, controller={"pb": line}))
    assert f"    controller: {line}" in report.splitlines()


def test_status_shows_the_guard_and_its_rollback():
    test = LiveTest(metric="success", version=3, parent_version=2, traces=41, parent_traces=60, mean=0.4,
                    parent_mean=0.8, log_lr=3.4, threshold=3.0, alpha=0.05, tau=0.2, min_traces=30)
    rollback = PromotionDecision(playbook_id="pb", decision_id=0, action="rollback", candidate_version=3,
                                 served_version=2, served=None, previous_version=3, rule="r", paused=True,
                                 reason="live success rate of v3 0.400 ...", live_test=test, by="guard",
                                 decided_at=NOW)
    on = CombeeSettings.load(env={})
    report = format_status(RunStatus(versions={"pb": 4}, promotion={"pb": rollback}, guard=guard_state(on)))
    assert "guard: on: rolls a version back when its live success" in report and "alpha 0.05" in report
    assert "served by the promoted pointer: v2, PAUSED" in report
    assert "rollback on candidate v3 -> serving v2 (was v3) by guard: live success rate of v3" in report
    assert "pending candidates" not in report
    assert guard_state(CombeeSettings.load(env={"COMBEE_GUARD": "0"})) == "off (COMBEE_GUARD=0)"
    assert guard_state(CombeeSettings.load(env={}, promotion=True)).startswith("off (promotion is on")
    assert guard_state(on, promotion=True).startswith("off (promotion is on"), "a run whose promoter decided"
