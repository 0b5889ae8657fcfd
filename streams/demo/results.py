"""What a demo run produces: its options, one row per version and per promotion decision, the controller's view,
and the whole result that ``results.json`` holds; each row built from the records the run published."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from combee_core.control.controller import epoch_delay
from combee_core.control.delay_model import clock_description, sample_delay
from combee_core.control.rollout import modelled_task_time_s
from combee_core.models import BatchMetrics, ControlDecision, PlaybookVersion, PromotionDecision, Usage
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import TaskSuite
from combee_core.sim.task_suite import expected_accuracy
from streams.demo.fleet import FleetMode, FleetReport


class DemoOptions(BaseModel):
    """What ``combee demo`` runs; the CLI flags map one to one."""

    model_config = ConfigDict(extra="forbid")

    fleet: int = Field(default=40, ge=1, description="Agents in the simulated fleet.")
    mode: FleetMode = "sync"
    traces: int | None = Field(default=None, ge=1, description="Traces in all; default one pass over the train split.")
    families: int = Field(default=24, ge=1, description="Rule families in the synthetic task suite.")
    suite_seed: int = Field(default=7, description="Seed of the task suite (pins the train / held-out split).")
    out: Path = Path("demo-results")
    playbook_id: str = "demo"
    misleading: int = Field(
        default=0, ge=0, description="Misleading traces (each states a family's harmful rule, docs/simulator.md) "
        "published once, when half the fleet's traces are out: with promotion, the candidate they make is rejected.")
    task_time_s: float | None = Field(
        default=None, ge=0, description="Simulated time an agent spends on a task; default in sync mode the rollout "
        "model's task time (38 modelled s) times the simulator's time scale (docs/simulator.md, 'Rollouts'), "
        "1 s in async mode (so versions arrive while the fleet works and staleness is visible).")

    def effective_task_time_s(self, settings: CombeeSettings | None = None) -> float:
        if self.task_time_s is not None:
            return self.task_time_s
        if self.mode == "sync":
            return modelled_task_time_s(settings or CombeeSettings.load(env={}))
        return 1.0


class VersionRow(BaseModel):
    """One published version, as the demo saw it."""

    version: int
    batch_id: int
    batch_size: int
    k: int
    entries: int
    playbook_tokens: int
    held_out_accuracy: float
    max_staleness: int
    delay_s: float
    llm_critical_path_s: float
    llm_calls: int
    seconds_since_start: float
    parent_version: int = 0
    decision: str | None = Field(default=None, description="With promotion: promote, reject or hold.")


class PromotionRow(BaseModel):
    """One decision on the promoted topic (runs with promotion on)."""

    decision_id: int
    action: str
    candidate_version: int | None
    served_version: int
    held_out_score: float | None
    incumbent_score: float | None
    reason: str
    cost_usd_per_point: float | None = None


class DelayPoint(BaseModel):
    batch_size: int
    batch_delay_s: float
    per_trace_delay_s: float


class ControllerSummary(BaseModel):
    """The controller's view: the demo's delay samples, and the controller's own fit and choice (its last
    ``ControlDecision``: the demo does not fit anything itself)."""

    clock: Literal["wall", "modelled"]
    auto: bool
    samples: list[DelayPoint] = Field(description="Every batch's delay, from the metrics topic.")
    fit_samples: list[DelayPoint] = Field(default_factory=list,
                                          description="The samples behind the last decision (the controller's).")
    fit_A: float | None = None
    fit_alpha: float | None = None
    fit_r2: float | None = None
    chosen_batch_sizes: list[int] = Field(description="Every batch size the controller decided, in order.")
    last_phase: str | None = None
    last_reason: str | None = None
    tau: float
    clock_description: str | None = Field(default=None, description="What the delays measure (the controller's).")
    plateau_batch_size: float | None = Field(default=None, description="bs* of the last decision: the smallest size "
                                            "within tau of the lowest modelled delay in the bounds.")
    bs_min: int | None = None
    bs_max: int | None = Field(default=None, description="The upper bound of the last decision.")
    best_batch_size: int | None = Field(default=None, description="The size with the lowest modelled delay within "
                                        "the bounds (last decision).")
    rollout_task_s: float | None = Field(default=None, description="One wave of rollouts as the controller measured "
                                         "it (sync fleets): the closed-form part of its round model.")
    fleet_agents: int | None = Field(default=None, description="The fleet size the controller's model assumed.")


class DemoResult(BaseModel):
    """Everything ``results.json`` holds."""

    schema_version: Literal[1] = 1
    started_at: datetime
    wall_s: float
    options: DemoOptions
    settings: dict
    broker: str
    traces_sent: int
    traces_incorporated: int
    dead_letters: int
    dead_letter_reasons: list[str]
    versions: list[VersionRow]
    accuracy_before: float
    accuracy_after: float
    playbook_entries: int
    playbook_tokens: int
    usage: Usage
    fleet: FleetReport
    controller: ControllerSummary
    plots: list[str]
    promotion: bool = False
    misleading_sent: int = 0
    promotions: list[PromotionRow] = Field(default_factory=list)
    served_version: int | None = Field(default=None, description="With promotion: the version agents run at the end.")
    cost_usd_per_point: float | None = Field(
        default=None, description="With promotion: the cost of every candidate (rejected ones too) divided by the "
        "held-out points the promotions gained (score x 100).")


def version_row(version: PlaybookVersion, suite: TaskSuite, started: float) -> VersionRow:
    stats = version.stats
    return VersionRow(
        version=version.version, batch_id=version.batch_id, batch_size=stats.batch_size, k=stats.k,
        entries=len(version.entries), playbook_tokens=stats.playbook_tokens,
        held_out_accuracy=expected_accuracy(suite, suite.held_out, version.entries),  # unrounded: the promoter's
        # score of the same version is this number, and both print it with the same digits
        max_staleness=stats.max_staleness, delay_s=round(stats.delay_s, 4),
        llm_critical_path_s=round(stats.llm_critical_path_s, 4), llm_calls=stats.llm_calls,
        seconds_since_start=round(time.monotonic() - started, 3), parent_version=version.parent_version,
    )


def promotion_row(decision: PromotionDecision) -> PromotionRow:
    return PromotionRow(decision_id=decision.decision_id, action=decision.action,
                        candidate_version=decision.candidate_version, served_version=decision.served_version,
                        held_out_score=decision.held_out_score, incumbent_score=decision.incumbent_score,
                        reason=decision.reason,
                        cost_usd_per_point=decision.cost.cost_usd_per_point if decision.cost else None)


def served_accuracy(rows: list[VersionRow], decisions: list[PromotionDecision], baseline: float) -> float:
    """Held-out accuracy of what the agents run at the end: the last version, or with promotion the served one."""
    if decisions:
        by_version = {row.version: row.held_out_accuracy for row in rows}
        return by_version.get(decisions[-1].served_version, round(baseline, 4))
    return rows[-1].held_out_accuracy if rows else round(baseline, 4)


def cost_per_point(decisions: list[PromotionDecision]) -> float | None:
    """Cost of the candidates behind the promotions over the held-out points they gained (None without a gain)."""
    promoted = [d.cost for d in decisions if d.action == "promote" and d.cost is not None]
    gain = sum(c.gain_points for c in promoted)
    return round(sum(c.cost_usd for c in promoted) / gain, 9) if gain > 0 else None


def delay_point(batch_size: int, batch_delay_s: float) -> DelayPoint:
    return DelayPoint(batch_size=batch_size, batch_delay_s=round(batch_delay_s, 6),
                      per_trace_delay_s=round(epoch_delay(batch_size, batch_delay_s), 6))


def controller_summary(settings: CombeeSettings, metrics: list[BatchMetrics], decisions: list[ControlDecision],
                       playbook_id: str) -> ControllerSummary:
    """Delay samples as the controller sees them, and its fit and choices as its last decision states them."""
    delays = [(m.batch_size, sample_delay(settings, m)) for m in metrics if m.playbook_id == playbook_id]
    samples = [delay_point(size, delay) for size, delay in delays if delay is not None]
    mine = [d for d in decisions if d.playbook_id == playbook_id]
    last = mine[-1] if mine else None
    return ControllerSummary(
        clock=settings.controller_clock, auto=settings.auto_batch_size, samples=samples,
        fit_samples=[delay_point(s.batch_size, s.delay_s) for s in last.samples] if last else [],
        fit_A=last.fit_A if last else None, fit_alpha=last.fit_alpha if last else None,
        fit_r2=last.r2 if last else None, chosen_batch_sizes=[d.batch_size for d in mine],
        last_phase=last.phase if last else None, last_reason=last.reason if last else None,
        tau=last.tau if last else settings.controller_tau,
        clock_description=(last.clock if last and last.clock else clock_description(settings)),
        plateau_batch_size=last.plateau_batch_size if last else None,
        bs_min=last.bs_min if last else None, bs_max=last.bs_max if last else None,
        best_batch_size=last.best_batch_size if last else None,
        rollout_task_s=last.rollout_task_s if last else None, fleet_agents=last.fleet_agents if last else None,
    )
