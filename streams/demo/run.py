"""``combee demo``: a simulated agent fleet learning a playbook live, end to end on a real broker.

The demo starts the whole topology in this process (the same worker ``combee worker`` runs), a fleet of simulated
agents (:mod:`streams.demo.fleet`) that run the synthetic task suite with the latest playbook version, and a follower
that scores every published version on the pinned held-out split. It returns a typed :class:`DemoResult` and
writes ``results.json`` and two plots into the output folder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from combee_core.errors import CombeeError
from combee_core.models import BatchMetrics, CallRecord, ControlDecision, PlaybookVersion, PromotionDecision, Usage
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, expected_accuracy, misleading_trace
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.demo.fleet import Fleet, FleetConfig, FleetMode
from streams.demo.results import (
    DemoOptions,
    DemoResult,
    VersionRow,
    controller_summary,
    cost_per_point,
    promotion_row,
    served_accuracy,
    version_row,
)
from streams.topology.follower import PlaybookFollower
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import send_traces
from streams.topology.stages.evaluate import register_suite


class DemoError(CombeeError, RuntimeError):
    """The demo cannot run as asked; the message says why and what to do."""


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


METRICS_WAIT_S = 30.0


async def metrics_of(run: InProcessPipeline, versions: int) -> list[BatchMetrics]:
    """The run's batch metrics, once there is one per version (the reducer writes a batch's metrics just after its
    version, so the last one can still be on its way); what there is after :data:`METRICS_WAIT_S`."""
    deadline = time.monotonic() + METRICS_WAIT_S
    metrics = await read_models(run, Topic.METRICS, BatchMetrics)
    while len(metrics) < versions and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        metrics = await read_models(run, Topic.METRICS, BatchMetrics)
    return metrics

async def run_demo(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    options: DemoOptions,
    *,
    on_progress: Callable[[DemoProgress], None] | None = None,
) -> DemoResult:
    """Run the fleet against the topology until every trace is incorporated; write results and plots."""
    started_at = datetime.now(timezone.utc)
    started = time.monotonic()
    settings = demo_settings(settings, started_at, options)
    suite = build_suite(families=options.families, seed=options.suite_seed)
    total = options.traces or len(suite.train)
    baseline = expected_accuracy(suite, suite.held_out, [])
    planned_misleading = min(options.misleading, len(suite.train))  # the run's traces: the fleet's and these
    progress = DemoProgress(traces_total=total + planned_misleading, auto_batch_size=settings.auto_batch_size,
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
        progress.traces_sent += len(traces)
        progress.promotions.append(f"published {len(traces)} misleading traces (harmful rules)")
        report()

    def on_traces(traces) -> None:
        if options.misleading and not injections and progress.traces_sent + len(traces) >= total // 2:
            injections.append(asyncio.create_task(mislead()))
        progress.traces_sent += len(traces)
        progress.batch_size = fleet.round_size()
        report()

    report("starting the topology")
    if settings.promotion:  # the promoter scores candidates on the suite's held-out split, a task set like any other
        await register_suite(settings, bootstrap, profile)
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
            versions = await run.versions(options.playbook_id)
            metrics = await metrics_of(run, len(versions))
            decisions: list[PromotionDecision] = []
            if settings.promotion:
                report("waiting for the last promotion decision")
                decisions = [d for d in await run.wait_decided(versions, timeout_s=120)
                             if d.playbook_id == options.playbook_id]
            else:  # the guard's rollbacks, if any: what the agents run at the end
                decisions = [d for d in await run.promotions() if d.playbook_id == options.playbook_id]
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
    from streams.demo.plots import plot_accuracy, plot_controller  # matplotlib takes seconds: only once the run is over

    controller_plot = plot_controller(controller, out / "controller_delay_fit.png")
    plots = [str(plot_accuracy(rows, baseline, out / "held_out_accuracy.png"))]
    plots += [str(controller_plot)] if controller_plot is not None else []
    result = DemoResult(
        started_at=started_at, wall_s=round(time.monotonic() - started, 3), options=options,
        settings=settings.model_dump(mode="json", exclude={"kafka", "llm_api_key"}), broker=bootstrap,
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
