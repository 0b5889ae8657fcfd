"""Helpers for topology tests: deterministic traces and run settings."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from combee_core.models import PlaybookEntry, PlaybookVersion, PromotionDecision, Trace
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from streams.ingest.otlp_receiver import OtlpReceiver, serve_receiver


def make_traces(count: int, playbook_id: str = "pb", *, seed: int = 0, agents: int = 40) -> list[Trace]:
    """``count`` simulated traces for ``playbook_id`` (all run with version 0), deterministic for the arguments."""
    return train_traces(build_suite(seed=7), count, playbook_ids=(playbook_id,), run_seed=seed, agents=agents)


def env_without_combee(**extra: str) -> dict[str, str]:
    """This process's environment minus every ``COMBEE_*`` setting, plus ``extra``: for a child ``combee``.
    ``COMBEE_STATE_DIR`` (where `combee broker` records itself; tests/conftest.py isolates it) is kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMBEE_") or k == "COMBEE_STATE_DIR"}
    env.update(extra)
    return env


SIZE_CLOSES_S = 15.0
"""max_wait_s of the runs whose batches must close by size (compared by content hash, their versions counted or their
decisions listed): their versions are the same only if their batches close at the same traces. At 3 s a loaded
machine closed batches early: after a kill -9 the restarted batcher got its redelivered reflections at once and the
new ones only after the reflector joined its group (3-6 s on Tansu); 160 traces for promotion made 5 versions instead
of 4 at load 9. A last batch that is not full closes by max_wait, so this is also what such a run waits for it."""


def run_settings(prefix: str, **overrides: object) -> CombeeSettings:
    """Settings for a fast test run: virtual simulator clock, short max_wait."""
    values: dict[str, object] = dict(topic_prefix=prefix, batch_size=40, p=2, max_wait_s=3.0, sim_clock="virtual",
                                     partitions=2)
    values.update(overrides)
    return CombeeSettings.load(env={}, **values)


def assert_contiguous(versions: list[PlaybookVersion], playbook_id: str, count: int) -> None:
    """Versions 1..count of ``playbook_id``, each exactly once and in order, each built on its predecessor."""
    mine = [v for v in versions if v.playbook_id == playbook_id]
    assert [v.version for v in mine] == list(range(1, count + 1)), [(v.version, v.content_hash[:8]) for v in mine]
    assert [v.parent_version for v in mine] == list(range(0, count))
    assert [v.batch_id for v in mine] == list(range(count))


def lineage_counts(versions: list[PlaybookVersion]) -> Counter[str]:
    return Counter(trace_id for v in versions for trace_id in v.lineage)


@dataclass
class ServedReceiver:
    """The OTLP/HTTP receiver of :func:`serving_receiver`; its counters once it has stopped."""

    receiver: OtlpReceiver | None = None
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        assert self.receiver is not None
        return self.receiver.url


@contextlib.asynccontextmanager
async def serving_receiver(settings: CombeeSettings, kafka) -> AsyncIterator[ServedReceiver]:
    """``combee otlp-receiver`` in this process, ready within 30 s; stopped (and its counters read) on exit."""
    stop, ready = asyncio.Event(), asyncio.Event()
    served = ServedReceiver()

    def on_ready(receiver: OtlpReceiver) -> None:
        served.receiver = receiver
        ready.set()

    serving = asyncio.create_task(serve_receiver(settings, kafka.bootstrap, kafka.profile, stop, on_ready))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield served
    finally:
        stop.set()
        served.counters = await serving


async def wait_decisions(run, count: int, timeout_s: float, playbook_id: str | None = None) -> list[PromotionDecision]:
    """The promotion decisions of ``run`` (of ``playbook_id`` only, when given) once there are ``count``, or those
    there are after ``timeout_s``; fails at once if a stage of the run died."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [d for d in await run.promotions() if playbook_id is None or d.playbook_id == playbook_id]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        run.check_alive()
        await asyncio.sleep(0.5)


async def helpful_then_harmful(run, settings: CombeeSettings, kafka, playbook_id: str, helpful: list[Trace],
                               harmful: list[Trace], evaluate: Callable[[], Coroutine[Any, Any, object]],
                               stop: Callable[[], None]) -> tuple[list[PromotionDecision], object]:
    """A team's gate, run the way both own-task tests run it: while ``evaluate()`` answers the evaluation requests,
    send the ``helpful`` traces and wait for their candidate's promotion, then the ``harmful`` ones and wait for the
    second decision; ``stop()`` ends the evaluator. Returns the decisions and what ``evaluate()`` returned."""
    from streams.topology.produce import produce_traces

    evaluating: asyncio.Task[object] = asyncio.create_task(evaluate())
    try:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, helpful)
        first = await wait_decisions(run, 1, timeout_s=120, playbook_id=playbook_id)
        assert [d.action for d in first] == ["promote"], [d.reason for d in first]
        await produce_traces(settings, kafka.bootstrap, kafka.profile, harmful)
        found = await wait_decisions(run, 2, timeout_s=120, playbook_id=playbook_id)
    finally:
        stop()
        metrics = await evaluating
    return found, metrics


async def publish_first_version(settings: CombeeSettings, kafka, playbook_id: str,
                                entries: list[PlaybookEntry]) -> PlaybookVersion:
    """Publish version 1 of ``playbook_id`` holding ``entries`` (the topics the review page reads are created)."""
    from datetime import UTC, datetime

    from combee_core.models import VersionStats
    from combee_core.topology import Topic

    version = PlaybookVersion(playbook_id=playbook_id, version=1, parent_version=0, batch_id=0, entries=entries,
                              next_entry_number=len(entries) + 1, operations=[], lineage=[],
                              stats=VersionStats(batch_size=1, k=1, p=1), content_hash="h",
                              published_at=datetime.now(UTC))
    await write_records(kafka, settings.topic(Topic.PLAYBOOK), [version.to_json_bytes()], playbook_id,
                        also_create=[settings.topic(t) for t in (Topic.PROMOTED, Topic.REVIEW)])
    return version


async def write_records(kafka, topic: str, values: list[bytes], key: str, also_create: Sequence[str] = ()) -> None:
    """Create ``topic`` (and ``also_create``) with one partition each and write ``values`` to it under ``key``, each
    acknowledged before the next."""
    from streams.broker.admin import create_topics
    from streams.topology.kafka_clients import start_producer

    await create_topics(kafka.bootstrap, {t: 1 for t in (topic, *also_create)}, connection=kafka.profile.connection)
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await producer.stop()
