"""LLM roles for a worker: the run's LLM configuration, with every call recorded on the ``llm-calls`` topic."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from combee_core.llm.roles import CallRecord, LLMConfig, LLMRoles
from combee_core.settings import CombeeSettings

if TYPE_CHECKING:
    from streams.runtime import StageContext

log = logging.getLogger(__name__)

OnCall = Callable[[CallRecord], Awaitable[None] | None]


def build_llm_roles(
    settings: CombeeSettings,
    *,
    producer_ctx: StageContext | None = None,
    on_call: OnCall | None = None,
    responder: object | None = None,
) -> LLMRoles:
    """LLM roles configured from ``settings``.

    Each call attempt is published to the ``llm-calls`` topic (keyed by its call key) when ``producer_ctx`` is given,
    and handed to ``on_call`` (tests, the demo's counters). A failed publish is logged, never fatal: the record is
    an audit trail, the stage's output does not depend on it.
    """

    async def record(call: CallRecord) -> None:
        if producer_ctx is not None:
            producer_ctx.count(f"llm_calls.{call.role}")
            try:
                await producer_ctx.send("llm-calls", call.key, call.model_dump_json().encode())
            except Exception as error:  # noqa: BLE001 - auditing must not stop the stage
                log.warning("could not record LLM call %s: %s", call.key[:12], error)
        if on_call is not None:
            result = on_call(call)
            if inspect.isawaitable(result):
                await result

    return LLMRoles(LLMConfig.from_settings(settings), on_call=record, responder=responder)  # type: ignore[arg-type]
