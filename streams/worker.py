"""A worker process: creates the run's topics, then runs all stages or a chosen subset as consumer-group members."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from combee_core.settings import CombeeSettings
from streams.broker import BrokerProfile, create_topics
from streams.llm_setup import build_llm_roles, replay_responder
from streams.runtime import Stage, StageContext, start_producer
from streams.stages.aggregator import AggregatorStage
from streams.stages.batcher import BatcherStage
from streams.stages.controller import ControllerStage
from streams.stages.reducer import ReducerStage
from streams.stages.reflector import ReflectorStage
from streams.topics import topic_partitions

if TYPE_CHECKING:
    from streams.health import WorkerReadiness

log = logging.getLogger(__name__)

STAGES: dict[str, type[Stage]] = {
    "reflect": ReflectorStage,
    "batch": BatcherStage,
    "aggregate": AggregatorStage,
    "reduce": ReducerStage,
    "control": ControllerStage,
}
ALL_STAGES = tuple(STAGES)
LLM_STAGES = {"reflect", "aggregate", "reduce"}


class UnknownStageError(ValueError):
    """A stage name that is not one of :data:`ALL_STAGES`."""


def parse_stages(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"reflect,batch"`` -> ("reflect", "batch"); None or "all" -> every stage, in topology order."""
    if spec is None or spec == "all":
        return ALL_STAGES
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [n for n in names if n not in STAGES]
    if unknown or not names:
        raise UnknownStageError(f"unknown stage(s) {unknown or names}; choose from {', '.join(ALL_STAGES)}")
    return tuple(n for n in ALL_STAGES if n in names)


async def ensure_topics(settings: CombeeSettings, bootstrap: str) -> None:
    """Create every topic of the run (idempotent)."""
    await create_topics(bootstrap, topic_partitions(settings))


async def run_worker(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    stages: Sequence[str] = ALL_STAGES,
    *,
    stop: asyncio.Event | None = None,
    on_call: Callable[[object], Awaitable[None] | None] | None = None,
    ready: asyncio.Event | None = None,
    readiness: "WorkerReadiness | None" = None,
) -> dict[str, int]:
    """Run the given stages until ``stop`` is set; returns the worker's counters (messages, dead letters...).

    ``readiness`` (for ``/readyz``) is handed the stages and their tasks once they are created.
    """
    stop = stop or asyncio.Event()
    await ensure_topics(settings, bootstrap)
    producer = await start_producer(bootstrap, profile)
    ctx = StageContext(settings=settings, bootstrap=bootstrap, profile=profile, producer=producer, stop=stop)
    try:
        misses: list[BaseException] = []
        if LLM_STAGES.intersection(stages):
            responder = None
            if settings.llm_record == "replay":  # a miss stops the worker, even from a background task
                responder = await replay_responder(settings, bootstrap, profile,
                                                   on_miss=lambda miss: (misses.append(miss), stop.set()))
            ctx.llm = build_llm_roles(settings, producer_ctx=ctx, on_call=on_call, responder=responder)
        instances = [STAGES[name](ctx) for name in stages]
        tasks = [asyncio.create_task(stage.run(), name=f"stage-{stage.name}") for stage in instances]
        if readiness is not None:
            readiness.watch(instances, tasks)
        log.info("worker running stages: %s", ", ".join(stages))
        if ready is not None:
            ready.set()
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        if any(task is not stopper and task.exception() is not None for task in done):
            stop.set()  # one stage died: stop the others, then raise its error
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        stopper.cancel()
        if misses:  # a replay miss is the cause, whatever the stages died of after it
            raise misses[0]
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
    finally:
        await producer.stop()
    return dict(ctx.counters)
