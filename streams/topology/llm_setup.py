"""LLM roles for a worker: the run's LLM configuration, with every call recorded on the ``llm-calls`` topic.

``llm_record=record`` also appends every call to ``llm_record_file``; ``llm_record=replay`` answers every call from
the record (``llm_record_file``, else ``llm_record_topic``, else the run's own ``llm-calls`` topic) and raises
``LLMRecordMiss`` for a call it does not hold (see docs/replay.md).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from combee_core.llm.config import LLMConfig
from combee_core.llm.record import CallIndex, CallStore, LLMRecordMiss, ReplayResponder, parse_call_lines
from combee_core.llm.roles import LLMRoles
from combee_core.log_limit import RepeatLimit
from combee_core.model_notice import role_models, simulated_roles
from combee_core.models import CallRecord
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

if TYPE_CHECKING:
    from streams.broker.profile import BrokerProfile
    from streams.topology.stage_context import StageContext

log = logging.getLogger(__name__)

OnCall = Callable[[CallRecord], Awaitable[None] | None]

LLM_LAYER = "combee_core.llm.provider"
"""What takes seconds to import (litellm): imported off the event loop, and only by a worker that calls a
provider (:func:`calls_a_provider`)."""


RECORD_FAILURE_SAY_EVERY_S = 60.0
"""A failure to record calls on ``llm-calls`` is logged once per kind of error, then at most this often."""


def calls_a_provider(settings: CombeeSettings) -> bool:
    """Whether a worker's roles call a provider through litellm: not in a replay (answered from the record), not
    when every role runs on the simulator (answered in-process, ``combee_core.llm.sim_calls``)."""
    return settings.llm_record != "replay" and len(simulated_roles(settings)) < len(role_models(settings))


async def import_off_loop(module: str = LLM_LAYER) -> None:
    """Import ``module`` in a daemon thread while the loop keeps going (health, the broker). Not the default
    executor: ``asyncio.run`` joins its threads at the end, so a SIGTERM during the import would wait for it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def work() -> None:
        error: BaseException | None = None
        try:
            importlib.import_module(module)
        except BaseException as raised:  # handed to the awaiting task
            error = raised
        try:
            loop.call_soon_threadsafe(settle, error)
        except RuntimeError:  # the loop closed meanwhile: nobody waits any more
            pass

    threading.Thread(target=work, daemon=True, name=f"import-{module}").start()
    await done


def build_llm_roles(
    settings: CombeeSettings,
    *,
    producer_ctx: StageContext | None = None,
    on_call: OnCall | None = None,
    responder: object | None = None,
) -> LLMRoles:
    """LLM roles configured from ``settings``.

    Each call attempt is published to the ``llm-calls`` topic (keyed by its call key) when ``producer_ctx`` is given,
    and handed to ``on_call`` (tests, the demo's counters). A failed publish is logged (one line per kind of error,
    then at most one a minute with the count, not one per call), never fatal: the record is an audit trail, the
    stage's output does not depend on it.
    """

    store = (CallStore(settings.llm_record_file) if settings.llm_record == "record" and settings.llm_record_file
             else None)
    unrecorded = RepeatLimit[str](RECORD_FAILURE_SAY_EVERY_S)

    async def record(call: CallRecord) -> None:
        if store is not None:
            store.append(call)
        if producer_ctx is not None:
            producer_ctx.count(f"llm_calls.{call.role}")
            try:
                await producer_ctx.send(Topic.LLM_CALLS, call.key, call.model_dump_json().encode())
            except Exception as error:  # auditing must not stop the stage
                if (calls := unrecorded.observe(type(error).__name__, time.monotonic())) is not None:
                    log.warning("could not record LLM call %s: %s%s", call.key[:12], error,
                                f" ({calls} calls not recorded since the last such line)" if calls > 1 else "")
        if on_call is not None:
            result = on_call(call)
            if inspect.isawaitable(result):
                await result

    return LLMRoles(LLMConfig.from_settings(settings), on_call=record, responder=responder)  # type: ignore[arg-type]


async def replay_responder(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    on_miss: Callable[[LLMRecordMiss], None] | None = None,
) -> ReplayResponder:
    """A responder answering from the run's call record: ``llm_record_file``, else a topic of call records."""
    if settings.llm_record_file:
        records = CallStore(settings.llm_record_file).load()
        source = settings.llm_record_file
    else:
        from streams.topology.topic_reader import read_topic

        source = settings.llm_record_topic or settings.topic(Topic.LLM_CALLS)
        raw = await read_topic(bootstrap, profile, source)
        records = parse_call_lines((r.value for r in raw if r.value), source)
    log.info("replaying LLM calls from %s (%d recorded attempts)", source, len(records))
    return ReplayResponder(CallIndex(records), on_miss=on_miss)
