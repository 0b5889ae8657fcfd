"""A simulated agent fleet: N agents read the latest playbook version, run tasks, and publish traces.

The agents are the synthetic task suite's simulated agents (``combee_core.tasks.run_task``); the playbook they run
with comes from the playbook topic, as it would for a real fleet. Two modes:

- ``sync``: the fleet runs one round of tasks (the playbook's current batch size, from the control topic, or the
  configured size) with one playbook version, then waits until every trace of the round is in a published
  version's lineage (or dead-lettered) before the next round — the paper's setting.
- ``async``: agents run continuously with whatever version is latest when they start a task; how far behind
  they were is reported as staleness (the reducer records it per version).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import BaseModel, ConfigDict, Field

from combee_core.models import ControlDecision, DeadLetter, PlaybookEntry, PlaybookVersion, PromotionDecision, Trace
from combee_core.promotion import PromotionLedger, in_canary
from combee_core.rollout import round_rollout_s
from combee_core.settings import CombeeSettings
from combee_core.tasks import Task, TaskSuite, run_task
from streams.broker import BrokerProfile
from streams.produce import send_traces
from streams.runtime import consumer_config, start_producer

FleetMode = Literal["sync", "async"]


class FleetConfig(BaseModel):
    """How the fleet behaves."""

    model_config = ConfigDict(extra="forbid")

    playbook_id: str = "demo"
    agents: int = Field(default=40, ge=1, le=10_000)
    mode: FleetMode = "sync"
    traces: int = Field(default=480, ge=1, description="Traces to publish in all (the train split, cycled).")
    task_time_s: float = Field(default=0.05, ge=0, description="Simulated time one agent spends on one task (the "
                               "demo derives it from the rollout model, combee_core/rollout.py).")
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


@dataclass
class PlaybookFollower:
    """Follows the playbook, control and dead-letter topics (and ``promoted`` with promotion on) from their
    beginning, in the background.

    ``latest`` holds the newest version per playbook, ``covered`` every trace id that is in some version's lineage
    or in a dead letter; ``on_version`` is called for each new version. With ``settings.promotion`` (and not
    ``candidates``) :meth:`playbook` is the *served* version of the ``promoted`` pointer, not the newest candidate.
    """

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    on_version: Callable[[PlaybookVersion], None] | None = None
    on_decision: Callable[[ControlDecision], None] | None = None
    """Called for each batch-size decision on the control topic (the demo shows it)."""
    check_alive: Callable[[], None] | None = None
    """Called while waiting; raises if what should produce the awaited records has died (e.g. the worker)."""
    on_promotion: Callable[[PromotionDecision], None] | None = None
    """Called for each decision on the promoted topic that counts."""
    candidates: bool = False
    """Run the newest candidate even with promotion on (``--candidates``)."""
    latest: dict[str, PlaybookVersion] = field(default_factory=dict)
    ledger: PromotionLedger = field(default_factory=PromotionLedger)
    batch_sizes: dict[str, int] = field(default_factory=dict)
    decisions: list[ControlDecision] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task | None = None
    _consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> PlaybookFollower:
        consumer = AIOKafkaConsumer(**consumer_config(self.bootstrap, self.profile, None))
        await consumer.start()
        self._consumer = consumer
        tps = [TopicPartition(self.settings.topic(name), 0) for name in ("playbook", "control", "promoted")]
        dlq = self.settings.topic("dlq")
        await consumer._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public refresh
        tps += [TopicPartition(dlq, p) for p in sorted(consumer.partitions_for_topic(dlq) or {0})]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow(consumer))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        topics = {self.settings.topic(name): name for name in ("playbook", "control", "promoted", "dlq")}
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            for tp, records in batch.items():
                for record in records:
                    self._take(topics[tp.topic], record.value)
            if batch:
                self._changed.set()

    def _take(self, topic: str, value: bytes) -> None:
        if topic == "playbook":
            version = PlaybookVersion.from_json_bytes(value)
            current = self.latest.get(version.playbook_id)
            if version.version != (current.version if current else 0) + 1:
                return  # not the next version: a fenced writer's duplicate (docs/protocol.md, "Reading versions")
            self.latest[version.playbook_id] = version
            self.covered.update(version.lineage)
            if self.on_version is not None:
                self.on_version(version)
        elif topic == "promoted":
            promotion = PromotionDecision.from_json_bytes(value)
            if self.ledger.apply(promotion) and self.on_promotion is not None:
                self.on_promotion(promotion)
        elif topic == "control":
            decision = ControlDecision.from_json_bytes(value)
            self.decisions.append(decision)
            self.batch_sizes[decision.playbook_id] = decision.batch_size
            if self.on_decision is not None:
                self.on_decision(decision)
        else:
            letter = DeadLetter.from_json_bytes(value)
            self.dead_letters.append(letter)
            if letter.trace_id:
                self.covered.add(letter.trace_id)

    def playbook(self, playbook_id: str, agent_id: str | None = None) -> tuple[int, list[PlaybookEntry]]:
        """(version, entries) an agent runs: with promotion on, the served version, or the candidate in canary for an
        agent in the canary share; else the newest version seen; (0, []) before the first."""
        if self.settings.promotion and not self.candidates:
            canary = self.ledger.canary(playbook_id)
            share = self.ledger.latest[playbook_id].canary_share if canary is not None else None
            if canary is not None and agent_id is not None and share and in_canary(agent_id, share):
                return canary.version, list(canary.entries)
            served = self.ledger.served(playbook_id)
            return (served.version, list(served.entries)) if served else (0, [])
        version = self.latest.get(playbook_id)
        return (version.version, version.entries) if version else (0, [])

    def batch_size(self, playbook_id: str) -> int:
        """The playbook's current batch size: the controller's latest decision, else the configured size."""
        return self.batch_sizes.get(playbook_id, self.settings.batch_size)

    def decision_count(self, playbook_id: str) -> int:
        return sum(1 for d in self.decisions if d.playbook_id == playbook_id)

    async def wait_for_decision(self, playbook_id: str, seen: int, grace_s: float) -> bool:
        """Wait up to ``grace_s`` until the playbook has more than ``seen`` decisions; False when none came."""
        try:
            await self.wait_until(lambda: self.decision_count(playbook_id) > seen, grace_s, "a decision")
        except TimeoutError:
            return False
        return True

    async def wait_incorporated(self, trace_ids: set[str], timeout_s: float, what: str) -> None:
        """Wait until every trace id is in a version's lineage or in a dead letter."""
        await self.wait_until(lambda: trace_ids <= self.covered, timeout_s, what)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait until ``condition()`` holds after some record arrived; TimeoutError naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self._task is not None and self._task.done():
                self._task.result()
                raise RuntimeError("the playbook follower stopped")
            if self.check_alive is not None:
                self.check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"waited {timeout_s:.0f}s for {what}")
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))


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
