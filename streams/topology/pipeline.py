"""Run the whole topology inside the current event loop: for the demo, benchmarks and integration tests.

``InProcessPipeline`` starts one worker (all stages, or a subset) as an asyncio task, hands every LLM call record
to a list, and offers reads of the run's output topics. It is the same ``run_worker`` that ``combee worker`` runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from combee_core.errors import CombeeError
from combee_core.log_order import valid_manifests, valid_versions
from combee_core.models import (
    BatchManifest,
    CallRecord,
    CombeeModel,
    ControlDecision,
    DeadLetter,
    PlaybookVersion,
    PromotionDecision,
    Reflection,
)
from combee_core.promote.promotion import PromotionLedger
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ALL_STAGES, ensure_topics, run_worker


class PipelineTimeout(CombeeError, TimeoutError):
    """The run did not reach the awaited state in time; the message says what it saw."""


@dataclass
class InProcessPipeline:
    """A worker running in this event loop. Use as ``async with InProcessPipeline(...) as run:``."""

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    stages: Sequence[str] = ALL_STAGES
    calls: list[CallRecord] = field(default_factory=list)
    on_call: Callable[[CallRecord], None] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    """The worker's counters, live while it runs (its final ones once stopped)."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task | None = None

    async def __aenter__(self) -> InProcessPipeline:
        await ensure_topics(self.settings, self.bootstrap, connection=self.profile.connection)
        ready = asyncio.Event()

        def record(call: CallRecord) -> None:
            self.calls.append(call)
            if self.on_call is not None:
                self.on_call(call)

        self._task = asyncio.create_task(
            run_worker(self.settings, self.bootstrap, self.profile, self.stages, stop=self._stop, on_call=record,
                       ready=ready, counters=self.counters)
        )
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait([self._task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()  # raises the worker's start-up error
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop the worker (finishing in-flight work) and re-raise any error it died of."""
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            self.counters = await task

    def check_alive(self) -> None:
        """Raise the worker's error if it has died."""
        if self._task is not None and self._task.done():
            self._task.result()
            raise RuntimeError("the worker stopped unexpectedly")

    async def wait_counter(self, name: str, value: int, *, timeout_s: float = 60.0, poll_s: float = 0.2) -> None:
        """Wait until the worker's counter ``name`` reaches ``value``."""
        deadline = time.monotonic() + timeout_s
        while self.counters.get(name, 0) < value:
            self.check_alive()
            if time.monotonic() >= deadline:
                raise PipelineTimeout(f"counter {name} is {self.counters.get(name, 0)} after {timeout_s:.0f}s, "
                                      f"waiting for {value}")
            await asyncio.sleep(poll_s)

    # ---------------------------------------------------------------------------------- reading outputs

    async def versions(self, playbook_id: str | None = None) -> list[PlaybookVersion]:
        """Every version so far that counts (in topic order; see ``combee_core.log_order``), optionally of one
        playbook."""
        return [v for v in valid_versions(await read_models(self, Topic.PLAYBOOK, PlaybookVersion))
                if playbook_id is None or v.playbook_id == playbook_id]

    async def dead_letters(self) -> list[DeadLetter]:
        return await read_models(self, Topic.DLQ, DeadLetter)

    async def manifests(self) -> list[BatchManifest]:
        """Every batch so far that counts (in topic order)."""
        return valid_manifests(await read_models(self, Topic.BATCHES, BatchManifest))

    async def decisions(self) -> list[ControlDecision]:
        return await read_models(self, Topic.CONTROL, ControlDecision)

    async def promotions(self) -> list[PromotionDecision]:
        """Every promotion decision so far that counts (in topic order: the first record of each decision id)."""
        ledger = PromotionLedger()
        return [d for d in await read_models(self, Topic.PROMOTED, PromotionDecision) if ledger.apply(d)]

    async def wait_decided(self, versions: list[PlaybookVersion], *, timeout_s: float = 120.0,
                           poll_s: float = 0.5) -> list[PromotionDecision]:
        """With promotion on: wait until the promoter has decided on every one of ``versions``."""
        wanted = {(v.playbook_id, v.version) for v in versions}
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            decisions = await self.promotions()
            missing = wanted - {(d.playbook_id, d.candidate_version) for d in decisions}
            if not missing:
                return decisions
            if time.monotonic() >= deadline:
                raise PipelineTimeout(f"{len(missing)} version(s) without a promotion decision after {timeout_s:.0f}s,"
                                      f" e.g. {sorted(missing)[:3]}")
            await asyncio.sleep(poll_s)

    async def wait_for(
        self,
        condition: Callable[[list[PlaybookVersion]], bool],
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        what: str = "the expected versions",
    ) -> list[PlaybookVersion]:
        """Poll the playbook topic until ``condition(versions)`` holds; raise :class:`PipelineTimeout` otherwise."""
        deadline = time.monotonic() + timeout_s
        versions: list[PlaybookVersion] = []
        while time.monotonic() < deadline:
            self.check_alive()
            versions = await self.versions()
            if condition(versions):
                return versions
            await asyncio.sleep(poll_s)
        summary = ", ".join(f"{v.playbook_id} v{v.version}" for v in versions[-5:]) or "none"
        raise PipelineTimeout(f"waited {timeout_s:.0f}s for {what}; {len(versions)} version(s) so far ({summary})")

    async def wait_for_lineage(self, trace_ids: set[str], *, timeout_s: float = 120.0,
                               poll_s: float = 0.5) -> list[PlaybookVersion]:
        """Wait until every trace id is in some version's lineage or in a dead letter; returns the versions."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            versions = await self.versions()
            missing = trace_ids - {t for v in versions for t in v.lineage}
            if missing:
                missing -= {d.trace_id for d in await self.dead_letters()}
                if not missing:  # a version may have landed while the dead letters were read (NotLearned follows it)
                    versions = await self.versions()
            if not missing:
                return versions
            if time.monotonic() >= deadline:
                raise PipelineTimeout(f"{len(missing)} trace(s) neither in a version nor dead-lettered after "
                                      f"{timeout_s:.0f}s: {await self.whereabouts(sorted(missing)[:3], versions)}")
            await asyncio.sleep(poll_s)

    async def whereabouts(self, trace_ids: list[str], versions: list[PlaybookVersion]) -> str:
        """How far each trace got (reflected? in which batch? the playbook's last version), for a timeout's
        message: the stage that holds a lost trace is named instead of guessed."""
        reflected = {r.trace_id for r in await read_models(self, Topic.REFLECTIONS, Reflection)}
        batch_of = {t: m for m in await self.manifests() for t in m.trace_ids}
        last = {v.playbook_id: v.version for v in versions}
        said = []
        for trace_id in trace_ids:
            manifest = batch_of.get(trace_id)
            where = ("not reflected" if trace_id not in reflected else "reflected, in no batch" if manifest is None
                     else f"in {manifest.playbook_id} batch {manifest.batch_id} (base v{manifest.base_version}, "
                          f"closed by {manifest.closed_by}; last version v{last.get(manifest.playbook_id, 0)})")
            said.append(f"{trace_id}: {where}")
        return "; ".join(said)


async def read_models(run: InProcessPipeline, topic: str, model: type[CombeeModel]) -> list:
    """Every record of a run's logical topic, parsed as ``model``."""
    records = await read_topic(run.bootstrap, run.profile, run.settings.topic(topic))
    return [model.from_json_bytes(record.value) for record in records]
