"""Shared by the benchmark scripts: run one configuration of the topology over a fixed set of train traces.

Every variant (sequential, naive, Combee, Combee + controller) is a :class:`Variant`, i.e. a set of settings for
the same Kafka topology; nothing here is a separate code path. Runs use the simulator's virtual clock: the latency
model is evaluated for every call (and drives the controller) but not slept, so a benchmark takes minutes, and its
delays are modelled seconds, not wall seconds.
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from combee_core.models import BatchMetrics, PlaybookVersion, Trace
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import TaskSuite
from combee_core.sim.task_suite import build_suite, expected_accuracy, train_traces
from combee_core.topology import Topic
from streams.testing.broker_under_test import ResolvedBroker, resolve_test_bootstrap
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces


@dataclass(frozen=True)
class Variant:
    """A named configuration of the topology."""

    name: str
    batch_size: int
    p: int = 2
    subgroups: str = "sqrt"
    auto: bool = False

    def overrides(self) -> dict[str, Any]:
        return dict(batch_size=self.batch_size, p=self.p, subgroups=self.subgroups, auto_batch_size=self.auto)


class RunResult(BaseModel):
    """One variant, one capacity, one seed."""

    variant: str
    capacity: int
    seed: int
    traces: int
    versions: int
    held_out_accuracy: float
    accuracy_before: float
    playbook_entries: int
    playbook_tokens: int
    epoch_delay_s: float
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    batch_sizes: list[int]
    wall_s: float
    rollout_s: float = 0.0
    """Sum over versions of the round's modelled rollout time (ceil(n / agents) task times)."""
    epoch_time_s: float = 0.0
    """epoch_delay_s + rollout_s: the paper's training time per epoch (modelled seconds)."""
    agents: int | None = None
    task_time_s: float = 0.0
    reducer_calls: int = 0
    merged_without_call: int = 0
    """Scan groups merged deterministically (no reducer call), summed over versions."""
    deterministic_merge: bool | None = None
    decisions: list[int] = []
    decision_reasons: list[str] = []
    """The controller's reason for each decision, in order (controller runs)."""
    """The controller's decided batch sizes, in order (controller runs)."""
    rounds: list[int] = []
    """Sizes of the rounds of rollouts (fed in rounds: as sent; else one per version)."""


def one_pass(suite: TaskSuite, seed: int, playbook_id: str = "bench") -> list[Trace]:
    """One pass over the train split, every agent run with the empty playbook (version 0)."""
    return train_traces(suite, len(suite.train), playbook_ids=(playbook_id,), run_seed=seed)


def start_broker() -> ResolvedBroker:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded Tansu (the same rule as the tests, minus Docker)."""
    return resolve_test_bootstrap(use_docker=False)


async def run_variant(
    broker: ResolvedBroker,
    variant: Variant,
    suite: TaskSuite,
    traces: Sequence[Trace],
    *,
    capacity: int,
    seed: int,
    max_wait_s: float = 3.0,
    timeout_s: float = 900.0,
    extra: dict[str, Any] | None = None,
    agents: int | None = 100,
) -> RunResult:
    """Send ``traces`` through a fresh run of the topology configured as ``variant``; measure the outcome.

    Epoch delay (modelled seconds) = sum over versions of (one reflection latency, as a batch's reflections run
    in parallel, + the version's LLM critical path: the slowest aggregator call + each reduce level's slowest call).
    Epoch time = epoch delay + each round's rollouts (``ceil(n / agents)`` task times of the rollout model,
    ``combee_core/control/rollout.py``): what a sync fleet of ``agents`` agents waits for per epoch. A fixed size's
    round is its batch (a burst gives the same batches); the controller's rounds are the ones fed to it. The controller
    runs with ``fleet_mode="sync"``, so it fits that round time.
    """
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = CombeeSettings.load(
        env={}, topic_prefix=prefix, run_seed=seed, sim_capacity=capacity, sim_clock="virtual",
        controller_clock="modelled", max_wait_s=max_wait_s, partitions=2, fleet_mode="sync", fleet_agents=agents,
        **variant.overrides(), **(extra or {}),
    )
    started = time.monotonic()
    async with InProcessPipeline(settings, broker.bootstrap, broker.profile) as run:
        rounds: list[int] | None = None
        if variant.auto:
            rounds = await feed_in_rounds(run, traces, timeout_s=timeout_s)
        else:
            await produce_traces(settings, broker.bootstrap, broker.profile, traces)
        versions = await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=timeout_s)
        metrics = await read_models(run, Topic.METRICS, BatchMetrics)
        control = await run.decisions() if variant.auto else []
        decisions = [d.batch_size for d in control]
        calls = list(run.calls)
    wall = time.monotonic() - started
    result = summarise(variant, suite, traces, versions, metrics, calls, capacity=capacity, seed=seed, wall_s=wall,
                       settings=settings, rounds=rounds)
    return result.model_copy(update={"decisions": decisions, "decision_reasons": [d.reason for d in control]})


async def feed_in_rounds(run: InProcessPipeline, traces: Sequence[Trace], *, timeout_s: float,
                         decision_grace_s: float = 1.0) -> list[int]:
    """Send traces one round at a time (the current batch size, from the control topic), each round after the
    previous one is in a version: how a sync fleet feeds the controller. Returns the rounds' sizes (a round can
    become two versions when a decision or ``max_wait_s`` closes its batch early: one round of rollouts still).

    A burst would let the batcher close every batch at the start size before the first metrics come back, so the
    controller could not act. After each round, up to ``decision_grace_s`` for a new decision to land (it comes
    after the round's version, and only when the size or the phase changes) before the next round."""
    from streams.topology.follower import PlaybookFollower
    from streams.topology.kafka_clients import start_producer
    from streams.topology.produce import send_traces

    settings = run.settings
    playbook_id = traces[0].playbook_id
    rounds: list[int] = []
    producer = await start_producer(run.bootstrap, run.profile)
    try:
        async with PlaybookFollower(settings, run.bootstrap, run.profile, check_alive=run.check_alive) as follower:
            position = 0
            while position < len(traces):
                decided = follower.decision_count(playbook_id)
                size = follower.batch_size(playbook_id)
                chunk = list(traces[position:position + size])
                position += size
                await send_traces(producer, settings, chunk)
                ids = {t.trace_id for t in chunk}
                rounds.append(len(chunk))
                await follower.wait_incorporated(ids, timeout_s, f"round {len(rounds)}")
                await follower.wait_for_decision(playbook_id, decided, decision_grace_s)
    finally:
        await producer.stop()
    return rounds


def summarise(variant, suite, traces, versions: list[PlaybookVersion], metrics, calls, *, capacity, seed,
              wall_s, settings: CombeeSettings | None = None, rounds: Sequence[int] | None = None) -> RunResult:
    """``rounds``: the sizes of the rounds a sync fleet sent (fed in rounds); else every version is one round."""
    from combee_core.control.rollout import modelled_task_time_s, round_rollout_s

    reflect = [c.latency_s for c in calls if c.role == "reflector" and c.error is None]
    reflect_latency = statistics.fmean(reflect) if reflect else 0.0
    epoch_delay = sum(reflect_latency + v.stats.llm_critical_path_s for v in versions)
    agents = settings.fleet_agents if settings is not None else None
    task_time = modelled_task_time_s(settings) if settings is not None else 0.0
    round_sizes = list(rounds) if rounds is not None else [v.stats.batch_size for v in versions]
    rollout = sum(round_rollout_s(size, agents, task_time) for size in round_sizes)
    final = versions[-1] if versions else None
    ok = list(calls)
    return RunResult(
        variant=variant.name, capacity=capacity, seed=seed, traces=len(traces), versions=len(versions),
        held_out_accuracy=round(expected_accuracy(suite, suite.held_out, final.entries if final else []), 4),
        accuracy_before=round(expected_accuracy(suite, suite.held_out, []), 4),
        playbook_entries=len(final.entries) if final else 0,
        playbook_tokens=final.stats.playbook_tokens if final else 0,
        epoch_delay_s=round(epoch_delay, 3), llm_calls=len(ok),
        prompt_tokens=sum(c.usage.prompt_tokens for c in ok),
        completion_tokens=sum(c.usage.completion_tokens for c in ok),
        cost_usd=round(sum(c.usage.cost_usd for c in ok), 6),
        batch_sizes=[m.batch_size for m in metrics], wall_s=round(wall_s, 2),
        rollout_s=round(rollout, 3), epoch_time_s=round(epoch_delay + rollout, 3), agents=agents,
        task_time_s=round(task_time, 4), reducer_calls=sum(1 for c in calls if c.role == "reducer"),
        merged_without_call=sum(v.stats.merged_without_call for v in versions), rounds=round_sizes,
        deterministic_merge=settings.deterministic_merge if settings is not None else None,
    )


def mean_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation."""
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    import os

    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu,
            "cpus": os.cpu_count(), "commit": commit}


def write_results(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")


def default_suite() -> TaskSuite:
    return build_suite(seed=7)
