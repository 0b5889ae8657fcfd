"""The reflector's decisions: a reflection per trace, published in input order; a trace whose reflection failed
(after the role's retries) is a dead letter with the reason.

The reflector LLM role and the context (the playbook entries the agent used, as they read in the version it ran
with) are injected. The traces of one fetch are reflected on concurrently. A used entry inherited from a parent
playbook (``scope/entry_id`` of another scope: docs/scopes.md) is not learned from here: each is counted
(``inherited_entries_not_learned``), and the reflection tags only the trace's own playbook's entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from combee_core.llm.errors import LLMError
from combee_core.models import Reflection, Trace
from combee_core.processors.effects import Count, Effect, Publish, Reject
from combee_core.serve.scopes import split_used
from combee_core.topology import Topic

ReflectRole = Callable[[Trace, str | None], Awaitable[Reflection]]
"""The reflector LLM role: one trace (and the entries it used, rendered) -> its reflection (may raise ``LLMError``)."""

UsedEntries = Callable[[Trace], Awaitable[str | None]]
"""The entries the agent used, as they read in the version it ran with (None when it used none)."""


async def reflect_all(traces: Sequence[tuple[Trace, object]], role: ReflectRole,
                      used_entries: UsedEntries) -> list[tuple[object, list[Effect]]]:
    """Reflect on the traces of one fetch (with their tokens) concurrently: per token, in input order, its effects
    (publish the reflection, or dead-letter the trace). The stage acknowledges the fetch once they are out."""

    async def reflect(trace: Trace) -> Reflection | LLMError:
        try:
            return await role(trace, await used_entries(trace))
        except LLMError as error:
            return error

    results = await asyncio.gather(*(reflect(trace) for trace, _ in traces))
    answered: list[tuple[object, list[Effect]]] = []
    for (trace, token), result in zip(traces, results, strict=True):
        if isinstance(result, Reflection):
            effects: list[Effect] = [Publish(Topic.REFLECTIONS, result.playbook_id, result), Count("reflections")]
            if inherited := inherited_used(trace):
                effects.append(Count("inherited_entries_not_learned", len(inherited)))
            answered.append((token, effects))
        else:
            answered.append((token, [Reject(token, f"reflection failed: {result}", type(result).__name__,
                                            trace_id=trace.trace_id, playbook_id=trace.playbook_id)]))
    return answered


def inherited_used(trace: Trace) -> list[str]:
    """The trace's used entries inherited from another scope (``metadata.used_entries``: comma-separated ids)."""
    used = str(trace.metadata.get("used_entries") or "")
    return split_used(trace.playbook_id, [part.strip() for part in used.split(",") if part.strip()])[1]
