"""A simulated agent fleet: N agents read the latest playbook version, run tasks, and publish traces.

The agents are the synthetic task suite's simulated agents (``combee_core.sim.task_suite.run_task``); the playbook
they run with comes from the playbook topic, as it would for a real fleet. Two modes:

- ``sync``: the fleet runs one round of tasks (the playbook's current batch size, from the control topic, or the
  configured size) with one playbook version, then waits until every trace of the round is in a published
  version's lineage (or dead-lettered) before the next round — the paper's setting.
- ``async``: agents run continuously with whatever version is latest when they start a task; how far behind
  they were is reported as staleness (the reducer records it per version).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from combee_core.control.rollout import round_rollout_s
from combee_core.models import PlaybookEntry, Trace
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import Task, TaskSuite
from combee_core.sim.task_suite import run_task
from streams.broker.profile import BrokerProfile
from streams.topology.follower import PlaybookFollower
from streams.topology.kafka_clients import start_producer
from streams.topology.produce import send_traces

FleetMode = Literal["sync", "async"]


class FleetConfig(BaseModel):
    """How the fleet behaves."""

    model_config = ConfigDict(extra="forbid")

    playbook_id: str = "demo"
    agents: int = Field(default=40, ge=1, le=10_000)
    mode: FleetMode = "sync"
    traces: int = Field(default=480, ge=1, description="Traces to publish in all (the train split, cycled).")
    task_time_s: float = Field(default=0.05, ge=0, description="Simulated time one agent spends on one task (the "
                               "demo derives it from the rollout model, combee_core/control/rollout.py).")
    round_timeout_s: float = Field(default=120.0, gt=0, description="Sync mode: longest wait for a round's version.")
    decision_grace_s: float = Field(
        default=1.0, ge=0, description="Sync mode with the controller on: after each round's version, wait up to this "
        "long for the controller's next decision (it comes after the version, and only when the size or the phase "
        "changes) so it sizes the next round; without it a round can be split into several batches.")


class FleetReport(BaseModel):
    """What the fleet did."""

    traces_sent: int
    rounds: int
    versions_used: list[int] = Field(description="Distinct playbook versions the agents ran with, ascending.")
    wall_s: float
    rollout_s: float = Field(default=0.0, description="Sync mode: the rounds' rollout time, sum over rounds of "
                             "ceil(round size / agents) x task time (what the fleet waited for its agents).")


def task_schedule(suite: TaskSuite, count: int) -> list[tuple[Task, int]]:
    """The first ``count`` (task, attempt) pairs of the train split, cycled: attempt = epoch number."""
    train = suite.train
    return [(train[i % len(train)], i // len(train)) for i in range(count)]


@dataclass
class Fleet:
    """N simulated agents publishing traces for one playbook."""

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    suite: TaskSuite
    follower: PlaybookFollower
    config: FleetConfig = field(default_factory=FleetConfig)
    on_traces: Callable[[Sequence[Trace]], None] | None = None
    versions_used: set[int] = field(default_factory=set)
    sent_ids: set[str] = field(default_factory=set)
    sent: int = 0
    rounds: int = 0
    rollout_s: float = 0.0

    async def run(self, stop: asyncio.Event | None = None) -> FleetReport:
        """Publish ``config.traces`` traces in the configured mode; returns when the last one is acknowledged
        (sync mode: when the last round is incorporated)."""
        stop = stop or asyncio.Event()
        started = time.monotonic()
        producer = await start_producer(self.bootstrap, self.profile)
        try:
            schedule = task_schedule(self.suite, self.config.traces)
            if self.config.mode == "sync":
                await self._run_sync(producer, schedule, stop)
            else:
                await self._run_async(producer, schedule, stop)
        finally:
            await producer.stop()
        return FleetReport(traces_sent=self.sent, rounds=self.rounds, versions_used=sorted(self.versions_used),
                           wall_s=round(time.monotonic() - started, 3), rollout_s=round(self.rollout_s, 3))

    def _trace(self, task: Task, attempt: int, agent: int,
               playbook: tuple[int, list[PlaybookEntry]] | None = None) -> Trace:
        """One agent's run of ``task`` with ``playbook`` (version, entries), by default the newest version seen."""
        agent_id = f"agent{agent:03d}"
        version, entries = playbook or self.follower.playbook(self.config.playbook_id, agent_id)
        self.versions_used.add(version)
        return run_task(self.suite, task, entries, playbook_id=self.config.playbook_id, playbook_version=version,
                        agent_id=agent_id, attempt=attempt, run_seed=self.settings.run_seed)

    def round_size(self) -> int:
        """The playbook's current batch size: the controller's latest decision, else the configured size."""
        return self.follower.batch_size(self.config.playbook_id)

    async def _publish(self, producer, traces: list[Trace]) -> None:
        await send_traces(producer, self.settings, traces)
        self.sent += len(traces)
        self.sent_ids.update(t.trace_id for t in traces)
        if self.on_traces is not None:
            self.on_traces(traces)

    async def _run_sync(self, producer, schedule: list[tuple[Task, int]], stop: asyncio.Event) -> None:
        position = 0
        while position < len(schedule) and not stop.is_set():
            decided = self.follower.decision_count(self.config.playbook_id)
            size = min(self.round_size(), len(schedule) - position)
            work = schedule[position:position + size]
            position += size
            # The agents work in parallel on the round's tasks, all with the same playbook version.
            per_agent = [work[a::self.config.agents] for a in range(min(self.config.agents, len(work)))]
            results = await asyncio.gather(*(self._agent_round(a, tasks) for a, tasks in enumerate(per_agent)))
            traces = [trace for agent_traces in results for trace in agent_traces]
            self.rollout_s += round_rollout_s(len(work), self.config.agents, self.config.task_time_s)
            await self._publish(producer, traces)
            self.rounds += 1
            ids = {t.trace_id for t in traces}
            what = f"round {self.rounds} ({len(ids)} traces) to reach a playbook version"
            await self.follower.wait_incorporated(ids, self.config.round_timeout_s, what)
            if self.settings.auto_batch_size and self.config.decision_grace_s:
                await self.follower.wait_for_decision(self.config.playbook_id, decided, self.config.decision_grace_s)

    async def _agent_round(self, agent: int, tasks: list[tuple[Task, int]]) -> list[Trace]:
        traces = []
        for task, attempt in tasks:
            if self.config.task_time_s:
                await asyncio.sleep(self.config.task_time_s)
            traces.append(self._trace(task, attempt, agent))
        return traces

    async def _run_async(self, producer, schedule: list[tuple[Task, int]], stop: asyncio.Event) -> None:
        queue: asyncio.Queue[tuple[Task, int]] = asyncio.Queue()
        for item in schedule:
            queue.put_nowait(item)

        async def agent(number: int) -> None:
            while not stop.is_set():
                try:
                    task, attempt = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                version_at_start = self.follower.playbook(self.config.playbook_id, f"agent{number:03d}")
                if self.config.task_time_s:
                    await asyncio.sleep(self.config.task_time_s)
                # The agent ran with the version it read when it started the task.
                await self._publish(producer, [self._trace(task, attempt, number, version_at_start)])

        await asyncio.gather(*(agent(n) for n in range(self.config.agents)))
        self.rounds = 1
