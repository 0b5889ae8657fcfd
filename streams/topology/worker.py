"""A worker process: creates the run's topics, then runs all stages or a chosen subset as consumer-group members."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sysconfig
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from combee_core.connection import PLAINTEXT, KafkaConnection
from combee_core.models import describe_error
from combee_core.settings import CombeeSettings, SettingsError
from combee_core.topology import STAGES as TOPOLOGY
from combee_core.topology import StageSpec, stage_spec
from streams.broker.admin import close_client, create_topics
from streams.broker.profile import BrokerProfile
from streams.broker.stopping import stopped_within
from streams.broker.watchdog import BrokerWatchdog, watching
from streams.topology import stages as bindings
from streams.topology.kafka_clients import start_producer
from streams.topology.llm_setup import OnCall, build_llm_roles, calls_a_provider, import_off_loop, replay_responder
from streams.topology.runtime import Stage
from streams.topology.stage_context import StageContext
from streams.topology.topics import topic_configs, topic_partitions

if TYPE_CHECKING:
    from streams.topology.health import WorkerReadiness

log = logging.getLogger(__name__)


def binding_module(spec: StageSpec) -> str:
    """The module of ``spec``'s binding: ``streams/topology/stages/<its name, - as _>.py``."""
    return f"{bindings.__name__}.{spec.name.replace('-', '_')}"


def _binding(spec: StageSpec) -> type[Stage]:
    """The class that runs ``spec``: the one ``Stage`` subclass of its :func:`binding_module` whose ``spec`` is it
    (declaring its ``spec`` is its registration)."""
    try:
        module = importlib.import_module(binding_module(spec))
    except ModuleNotFoundError as missing:
        if missing.name != binding_module(spec):
            raise
        raise ImportError(f"stage {spec.name!r} declared in combee_core/topology.py has no binding: add "
                          f"{binding_module(spec).replace('.', '/')}.py") from missing
    found = [cls for cls in vars(module).values() if isinstance(cls, type) and issubclass(cls, Stage)
             and cls.__module__ == module.__name__ and vars(cls).get("spec") is spec]
    if len(found) != 1:
        raise ImportError(f"stage {spec.name!r} declared in combee_core/topology.py needs exactly one Stage subclass "
                          f"with that spec in {module.__name__}, found {len(found)}")
    return found[0]


STAGES: dict[str, type[Stage]] = {spec.name: _binding(spec) for spec in TOPOLOGY}
"""Stage name -> the class that runs it, in the topology's order (``combee_core.topology.STAGES``)."""
ALL_STAGES = tuple(STAGES)
LLM_STAGES = {spec.name for spec in TOPOLOGY if spec.llm}


def runnable(stages: Sequence[str], settings: CombeeSettings) -> tuple[list[str], dict[str, str]]:
    """(the stages that run under ``settings``, the others with what they need: ``StageSpec.runs_when``)."""
    running = [name for name in stages if stage_spec(name).runs_when(settings)]
    return running, {name: stage_spec(name).runs_when.said for name in stages if name not in running}


class UnknownStageError(SettingsError):
    """A stage name that is not one of :data:`ALL_STAGES`."""


class StageStopped(RuntimeError):
    """A stage's task ended without an error before the worker was asked to stop."""


def parse_stages(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"reflect,batch"`` -> ("reflect", "batch"); None or "all" -> every stage, in topology order."""
    if spec is None or spec == "all":
        return ALL_STAGES
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [n for n in names if n not in STAGES]
    if unknown or not names:
        raise UnknownStageError(f"unknown stage(s) {unknown or names}; choose from {', '.join(ALL_STAGES)}")
    return tuple(n for n in ALL_STAGES if n in names)


async def ensure_topics(settings: CombeeSettings, bootstrap: str, *,
                        connection: KafkaConnection = PLAINTEXT) -> None:
    """Create every topic of the run (idempotent), ``checkpoints`` compacted (``topic_configs``)."""
    await create_topics(bootstrap, topic_partitions(settings), connection=connection,
                        configs=topic_configs(settings))


STAGE_DRAIN_S = 4.5
"""Seconds the stages get, once stopped, to drain and commit; then they are cancelled."""
CANCEL_UNWIND_S = 1.0
"""Seconds cancelled stages get to unwind."""
PRODUCER_STOP_S = 1.5
"""Seconds the producer gets to flush and close."""
STOP_BUDGET_S = STAGE_DRAIN_S + CANCEL_UNWIND_S + PRODUCER_STOP_S
"""From the stop request until the worker has returned, whatever the broker does (7 s: SIGTERM exits within 10, the
rest for the interpreter to stop; at 8 s a worker under load took 10.06 s)."""


async def run_worker(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    stages: Sequence[str] = ALL_STAGES,
    *,
    stop: asyncio.Event | None = None,
    on_call: OnCall | None = None,
    ready: asyncio.Event | None = None,
    readiness: WorkerReadiness | None = None,
    counters: dict[str, int] | None = None,
) -> dict[str, int]:
    """Run the given stages until ``stop`` is set; returns the worker's counters (messages, dead letters...), kept
    in ``counters`` as they change when given.

    A broker that stays unreachable for ``settings.broker_loss_grace_s`` (or comes back without the run's topics)
    stops the worker with :class:`~streams.broker.tansu.BrokerLost`. Once ``stop`` is set the worker returns within
    :data:`STOP_BUDGET_S`: stages still draining then are cancelled (their uncommitted records are redelivered).
    ``readiness`` (for ``/readyz``) is handed the stages and their tasks once they are created.
    """
    stop = stop or asyncio.Event()
    await ensure_topics(settings, bootstrap, connection=profile.connection)
    watchdog = BrokerWatchdog(bootstrap, settings.broker_loss_grace_s, stop, topics=set(topic_partitions(settings)),
                              connection=profile.connection)
    if readiness is not None:
        readiness.broker = watchdog
    producer = await start_producer(bootstrap, profile)
    ctx = StageContext(settings=settings, bootstrap=bootstrap, profile=profile, producer=producer, stop=stop,
                       counters={} if counters is None else counters)
    try:
        async with watching(watchdog):
            counters = await _run_stages(ctx, stages, on_call=on_call, ready=ready, readiness=readiness)
    except Exception as error:
        if watchdog.cause is not None:  # whatever the stages died of, the lost broker is the cause
            raise watchdog.cause from error
        raise
    finally:
        await _stop_producer(producer, PRODUCER_STOP_S)
    if watchdog.cause is not None:  # the stages stopped because the broker is gone: that is the error
        raise watchdog.cause
    return counters


STRAY_CANCEL_RERUNS = 5
"""Times in a row a stage is run again after a stray cancel (:func:`_run_stage`) before it ends the worker."""
STRAY_CANCEL_PAUSE_S = 1.0
"""Pause before the first such rerun, doubled for each next one (to 8 s): 1 + 2 + 4 + 8 + 8 s in all."""
STRAY_CANCEL_STEADY_S = 60.0
"""A stage that ran this long since its last rerun counts its reruns from zero again."""


async def _run_stage(stages: list[Stage], index: int, on_rerun: Callable[[], None] = lambda: None) -> None:
    """Run ``stages[index]`` until it returns; run it again, as a new instance, after a stray cancel; log where an
    error that ends it came from.

    A stray cancel is a CancelledError its task was not sent (``task.cancelling()`` is 0) while the worker is not
    stopping: a cancel a client's timeout left pending (Python 3.11), or a future cancelled under the stage inside a
    client. It is the client's fault, not the stage's: the stage's consumer leaves its group, a new instance of the
    stage rebuilds its state from the logs (``prepare``) and joins again, and the records the old one had not
    committed are delivered again (every write has a deterministic id: effectively once), the way a restarted worker
    carries on. Logged with its frames; at most :data:`STRAY_CANCEL_RERUNS` in a row, with a growing pause, then
    the CancelledError ends the stage and so the worker (``StageStopped``). A cancel sent to the task (the worker
    stopping) ends it at once. ``on_rerun`` is called when ``stages[index]`` is the new instance."""
    stage = stages[index]
    reruns, since = 0, time.monotonic()
    while True:
        try:
            if reruns:
                if await stopped_within(stage.ctx.stop, min(8.0, STRAY_CANCEL_PAUSE_S * 2 ** (reruns - 1))):
                    return
                stages[index] = stage = type(stage)(stage.ctx)
                on_rerun()
            await stage.run()
            return
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            if task is None or task.cancelling() or stage.ctx.stop.is_set():
                raise  # sent to this task: the worker is stopping it
            reruns = 1 if time.monotonic() - since >= STRAY_CANCEL_STEADY_S else reruns + 1
            since = time.monotonic()
            stage.ctx.count(f"stray_cancels.{stage.name}")
            if reruns > STRAY_CANCEL_RERUNS:
                log.error("stage %s: a CancelledError its task was not sent, %d times in a row; the last one was "
                          "raised at %s", stage.name, reruns, _frames(cancelled))
                raise
            log.warning("stage %s: a CancelledError its task was not sent (a client's stray cancel), raised at %s; "
                        "running the stage again (%d of %d)", stage.name, _frames(cancelled), reruns,
                        STRAY_CANCEL_RERUNS)
        except Exception as error:  # the worker stops with it; say which stage and where (the exit line does not)
            log.error("stage %s failed: %s, raised at %s", stage.name, describe_error(error), _frames(error))
            raise


def _frames(error: BaseException, limit: int = 24) -> str:
    """Where ``error`` came from in one line: its traceback's frames below the caller's, outermost first (the
    stage's own frames, then the client's, then asyncio's), each as ``file:line function``."""
    frames = traceback.extract_tb(error.__traceback__)[1:][-limit:]
    return " > ".join(f"{_short_path(f.filename)}:{f.lineno} {f.name}" for f in frames) or "an unknown place"


_SHORTENED = ("/site-packages/", f"{sysconfig.get_paths()['stdlib']}/", f"{Path(__file__).resolve().parents[2]}/")


def _short_path(filename: str) -> str:
    """A frame's file relative to site-packages, the standard library or the project."""
    for root in _SHORTENED:
        if root in filename:
            return filename.rsplit(root, 1)[1]
    return filename


async def _run_stages(
    ctx: StageContext,
    stages: Sequence[str],
    *,
    on_call: OnCall | None,
    ready: asyncio.Event | None,
    readiness: WorkerReadiness | None,
) -> dict[str, int]:
    settings, stop = ctx.settings, ctx.stop
    misses: list[BaseException] = []
    if LLM_STAGES.intersection(stages):
        responder = None
        if settings.llm_record == "replay":  # a miss stops the worker, even from a background task

            def on_miss(miss: BaseException) -> None:
                misses.append(miss)
                stop.set()

            responder = await replay_responder(settings, ctx.bootstrap, ctx.profile, on_miss=on_miss)
        elif calls_a_provider(settings):  # litellm takes seconds to import: in a thread, so the event loop
            await import_off_loop()  # (health, the broker) keeps going
        ctx.llm = build_llm_roles(settings, producer_ctx=ctx, on_call=on_call, responder=responder)
    stages, off = runnable(stages, settings)
    for name, said in off.items():
        log.info("not running %s: it runs %s", name, said)
    instances = [STAGES[name](ctx) for name in stages]
    tasks: list[asyncio.Task] = []

    def watch() -> None:  # readiness and metrics follow a stage run again as a new instance
        if readiness is not None:
            readiness.watch(instances, tasks)

    tasks += [asyncio.create_task(_run_stage(instances, index, watch), name=f"stage-{stage.name}")
              for index, stage in enumerate(instances)]
    watch()
    log.info("worker running stages: %s", ", ".join(stages))
    if ready is not None:
        ready.set()
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # cancelled from outside: no draining, just unwind
        stop.set()
        await _finish_stages(tasks, 0)
        raise
    finally:
        stopper.cancel()
    ended_early = [task for task in done if task is not stopper and not stop.is_set()]
    stop.set()  # asked to stop, or a stage ended on its own: stop the others
    outcomes = await _finish_stages(tasks, STAGE_DRAIN_S)
    if misses:  # a replay miss is the cause, whatever the stages died of after it
        raise misses[0]
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
    if ended_early:
        raise StageStopped(f"{ended_early[0].get_name()} stopped before the worker was asked to "
                           f"({'cancelled' if ended_early[0].cancelled() else 'returned'})")
    return dict(ctx.counters)


async def _finish_stages(tasks: Sequence[asyncio.Task], budget_s: float) -> list[BaseException | None]:
    """Wait up to ``budget_s`` for the stopping stages, then cancel the ones still running (a broker that does not
    answer makes draining, committing and leaving the group wait); returns each task's error, None if it stopped
    cleanly or was cancelled here."""
    pending = {task for task in tasks if not task.done()}
    if pending and budget_s > 0:
        _, pending = await asyncio.wait(pending, timeout=budget_s)
    for task in pending:
        log.warning("%s did not stop within %g s; cancelled (its uncommitted records will be redelivered)",
                    task.get_name(), budget_s)
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=CANCEL_UNWIND_S)  # one whose cleanup awaits the broker is left behind
    return [task.exception() if task.done() and not task.cancelled() else None for task in tasks]


async def _stop_producer(producer, timeout_s: float) -> None:
    """Flush and close the producer, giving up after ``timeout_s`` (unsent records are the stages' uncommitted
    ones, redelivered on restart)."""
    await close_client(producer.stop(), "the producer", timeout_s)
