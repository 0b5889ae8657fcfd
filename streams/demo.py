"""``combee demo``: a simulated agent fleet learning a playbook live, end to end on a real broker.

The demo starts the whole topology in this process (the same worker ``combee worker`` runs), a fleet of simulated
agents (:mod:`streams.fleet`) that run the synthetic task suite with the latest playbook version, and a follower
that scores every published version on the pinned held-out split. It returns a typed :class:`DemoResult` and
writes ``results.json`` and two plots into the output folder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from combee_core.controller import clock_description, epoch_delay, sample_delay
from combee_core.errors import CombeeError
from combee_core.llm.roles import CallRecord
from combee_core.models import BatchMetrics, ControlDecision, PlaybookVersion, PromotionDecision, Usage
from combee_core.rollout import modelled_task_time_s
from combee_core.settings import CombeeSettings
from combee_core.tasks import TaskSuite, build_suite, expected_accuracy, misleading_trace
from streams.broker import BrokerProfile
from streams.fleet import Fleet, FleetConfig, FleetMode, FleetReport, PlaybookFollower
from streams.pipeline import InProcessPipeline, read_models
from streams.produce import send_traces
from streams.runtime import start_producer


class DemoError(CombeeError, RuntimeError):
    """The demo cannot run as asked; the message says why and what to do."""


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


@dataclass
class DemoProgress:
    """Live state the CLI renders."""

    traces_total: int
    auto_batch_size: bool = False
    traces_sent: int = 0
    version: int = 0
    batch_size: int = 0
    accuracy_before: float = 0.0
    accuracy: float = 0.0
    entries: int = 0
    llm_calls: int = 0
    cost_usd: float = 0.0
    phase: str = "starting"
    elapsed_s: float = 0.0
    history: list[VersionRow] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` at the demo's start: a live view ticks ``elapsed`` from it between reports."""
    mode: FleetMode = "sync"
    decisions: int = 0
    """ControlDecisions seen so far for the demo's playbook."""
    decided_batch_size: int | None = None
    """The controller's latest decision (None before its first)."""
    decision_phase: str | None = None
    traces_learned: int = 0
    """Traces in the lineage of some version so far."""
    served_version: int | None = None
    """With promotion: the version the agents run."""
    promotions: list[str] = field(default_factory=list)
    """With promotion: one line per decision, in order."""

    def elapsed_now(self) -> float:
        """Seconds since the demo started, read now (not at the last report)."""
        return time.monotonic() - self.started


def demo_settings(base: CombeeSettings, started: datetime, options: DemoOptions | None = None) -> CombeeSettings:
    """The run's settings: a fresh topic namespace per demo, so reruns on a lasting Kafka never mix; the fleet's
    mode and size, so the controller fits the delay this fleet waits for (the round time in sync mode)."""
    stamp = started.strftime("%Y%m%d%H%M%S")
    prefix = base.topic_prefix if base.topic_prefix != "combee." else f"combee.demo-{stamp}-{base.run_seed}."
    update: dict = {"topic_prefix": prefix}
    if options is not None:
        update.update(fleet_mode=options.mode, fleet_agents=options.fleet)
    return base.model_copy(update=update)


def version_row(version: PlaybookVersion, suite: TaskSuite, started: float) -> VersionRow:
    stats = version.stats
    return VersionRow(
        version=version.version, batch_id=version.batch_id, batch_size=stats.batch_size, k=stats.k,
        entries=len(version.entries), playbook_tokens=stats.playbook_tokens,
        held_out_accuracy=round(expected_accuracy(suite, suite.held_out, version.entries), 4),
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


async def run_demo(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    options: DemoOptions,
    *,
    on_progress: Callable[[DemoProgress], None] | None = None,
) -> DemoResult:
    """Run the fleet against the topology until every trace is incorporated; write results and plots."""
    from streams.plots import plot_accuracy, plot_controller

    started_at = datetime.now(timezone.utc)
    started = time.monotonic()
    settings = demo_settings(settings, started_at, options)
    suite = build_suite(families=options.families, seed=options.suite_seed)
    total = options.traces or len(suite.train)
    baseline = expected_accuracy(suite, suite.held_out, [])
    progress = DemoProgress(traces_total=total, auto_batch_size=settings.auto_batch_size,
                            batch_size=settings.batch_size, accuracy_before=round(baseline, 4),
                            accuracy=round(baseline, 4), started=started, mode=options.mode)
    usage = Usage()

    def report(phase: str | None = None) -> None:
        if phase:
            progress.phase = phase
        progress.elapsed_s = time.monotonic() - started
        if on_progress is not None:
            on_progress(progress)

    def on_call(call: CallRecord) -> None:
        nonlocal usage
        usage = usage + call.usage
        progress.llm_calls, progress.cost_usd = usage.calls, usage.cost_usd

    def on_version(version: PlaybookVersion) -> None:
        if version.playbook_id != options.playbook_id:
            return
        row = version_row(version, suite, started)
        progress.history.append(row)
        progress.traces_learned += len(version.lineage)
        progress.version, progress.accuracy, progress.entries = row.version, row.held_out_accuracy, row.entries
        report()

    def on_decision(decision: ControlDecision) -> None:
        if decision.playbook_id != options.playbook_id:
            return
        progress.decisions += 1
        progress.decided_batch_size, progress.decision_phase = decision.batch_size, decision.phase
        report()

    def on_promotion(decision: PromotionDecision) -> None:
        if decision.playbook_id != options.playbook_id:
            return
        progress.served_version = decision.served_version
        about = f"v{decision.candidate_version} " if decision.candidate_version is not None else ""
        scores = (f" (held-out {decision.held_out_score:.3f} vs {decision.incumbent_score:.3f})"
                  if decision.held_out_score is not None and decision.incumbent_score is not None else "")
        progress.promotions.append(f"{about}{decision.action}{scores}: agents run v{decision.served_version}")
        report()

    misleading_ids: set[str] = set()
    injections: list[asyncio.Task] = []

    async def mislead() -> None:
        """Publish the misleading traces, as a wrong grader would, beside the fleet's."""
        version = progress.served_version if progress.served_version is not None else progress.version
        traces = [misleading_trace(suite, task, playbook_id=options.playbook_id, playbook_version=version,
                                   agent_id=f"misled{i % 4}", attempt=0)
                  for i, task in enumerate(suite.train[:options.misleading])]
        producer = await start_producer(bootstrap, profile)
        try:
            await send_traces(producer, settings, traces)
        finally:
            await producer.stop()
        misleading_ids.update(t.trace_id for t in traces)
        progress.promotions.append(f"published {len(traces)} misleading traces (harmful rules)")
        report()

    def on_traces(traces) -> None:
        if options.misleading and not injections and progress.traces_sent + len(traces) >= total // 2:
            injections.append(asyncio.create_task(mislead()))
        progress.traces_sent += len(traces)
        progress.batch_size = fleet.round_size()
        report()

    report("starting the topology")
    async with InProcessPipeline(settings, bootstrap, profile, on_call=on_call) as run:
        earlier = await run.versions(options.playbook_id)
        if earlier:
            # Its trace ids would repeat the earlier run's, which the pipeline (rightly) ignores as duplicates.
            raise DemoError(f"topics {settings.topic_prefix}* already hold {len(earlier)} version(s) of playbook "
                            f"{options.playbook_id!r} from an earlier run; give a fresh --prefix (or none, for a "
                            f"new one per run)")
        async with PlaybookFollower(settings, bootstrap, profile, on_version=on_version, on_decision=on_decision,
                                    on_promotion=on_promotion, check_alive=run.check_alive) as follower:
            fleet = Fleet(settings, bootstrap, profile, suite, follower,
                          FleetConfig(playbook_id=options.playbook_id, agents=options.fleet, mode=options.mode,
                                      traces=total, task_time_s=options.effective_task_time_s(settings)),
                          on_traces=on_traces)
            report(f"fleet running ({options.mode})")
            fleet_report = await fleet.run()
            report("waiting for the last traces to reach a version")
            await asyncio.gather(*injections)
            sent_ids = set(fleet.sent_ids) | misleading_ids
            await follower.wait_incorporated(sent_ids, timeout_s=settings.max_wait_s + 120,
                                             what="every trace to reach a version or a dead letter")
            metrics = await read_models(run, "metrics", BatchMetrics)
            versions = await run.versions(options.playbook_id)
            decisions: list[PromotionDecision] = []
            if settings.promotion:
                report("waiting for the last promotion decision")
                decisions = [d for d in await run.wait_decided(versions, timeout_s=120)
                             if d.playbook_id == options.playbook_id]
            dead = await run.dead_letters()
            controller = controller_summary(settings, metrics, follower.decisions, options.playbook_id)
        report("stopping the topology")

    seen = {row.version: row for row in progress.history}  # scored live, when each version arrived
    rows = [seen.get(v.version) or version_row(v, suite, started) for v in versions]
    decided = {d.candidate_version: d.action for d in decisions if d.action in ("promote", "reject", "hold")}
    rows = [row.model_copy(update={"decision": decided.get(row.version)}) for row in rows]
    final = versions[-1] if versions else None
    incorporated = {t for v in versions for t in v.lineage}
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    controller_plot = plot_controller(controller, out / "controller_delay_fit.png")
    plots = [str(plot_accuracy(rows, baseline, out / "held_out_accuracy.png"))]
    plots += [str(controller_plot)] if controller_plot is not None else []
    result = DemoResult(
        started_at=started_at, wall_s=round(time.monotonic() - started, 3), options=options,
        settings=settings.model_dump(mode="json"), broker=bootstrap,
        traces_sent=fleet_report.traces_sent + len(misleading_ids),
        traces_incorporated=len(incorporated & sent_ids), dead_letters=len(dead),
        dead_letter_reasons=sorted({f"{d.stage}: {d.reason[:120]}" for d in dead}),
        versions=rows, accuracy_before=round(baseline, 4),
        accuracy_after=served_accuracy(rows, decisions, baseline),
        playbook_entries=len(final.entries) if final else 0,
        playbook_tokens=final.stats.playbook_tokens if final else 0,
        usage=usage, fleet=fleet_report, controller=controller, plots=plots,
        promotion=settings.promotion, misleading_sent=len(misleading_ids),
        promotions=[promotion_row(d) for d in decisions],
        served_version=decisions[-1].served_version if decisions else None,
        cost_usd_per_point=cost_per_point(decisions),
    )
    (out / "results.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    if final is not None:
        (out / "playbook.json").write_text(final.model_dump_json(indent=2), encoding="utf-8")
    report("done")
    return result
