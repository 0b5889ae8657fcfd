"""The aggregators' decisions: which copies a window takes (redelivered and late ones are acknowledged and
ignored), when a window is ready (complete, or closed by its timeout), and the partial it publishes.

The aggregator LLM role and the context (the playbook version the batch's copies name, rendered: the one before the
version it will be applied to with the default ``context_lag`` 1, that version itself with 0) are injected.
A call that fails after retries gives a dead letter naming the window's traces and an empty partial with ``error``,
so the batch still completes at the reducer. The stage launches one task per ready window and performs its effects.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from combee_core.aggregate.windows import ReadyWindow, SubgroupWindows, WindowKey
from combee_core.llm.errors import LLMError
from combee_core.models import Operation, PartialUpdate, Reflection, ShuffledReflection, Usage, UseTag
from combee_core.playbook.outcomes import distinct_outcomes
from combee_core.processors.effects import Count, Effect, Publish, Reject, acknowledge
from combee_core.topology import Topic

log = logging.getLogger(__name__)

class Proposal(Protocol):
    """What a role call answers (``combee_core.llm.roles.RoleResult``)."""

    @property
    def operations(self) -> list[Operation]: ...

    @property
    def usage(self) -> Usage: ...

    @property
    def latency_s(self) -> float: ...


AggregateRole = Callable[[Sequence[Reflection], str], Awaitable[Proposal]]
"""The aggregator LLM role: the operations of one window's reflections, given the playbook as context (may raise
``LLMError``)."""

PlaybookContext = Callable[[str, int], Awaitable[str]]
"""(playbook_id, version) -> that version rendered for the prompt ("" without context)."""


def use_tags(reflections: Sequence[Reflection]) -> list[UseTag]:
    """The helpful/harmful entry tags of these reflections, one per (entry, verdict, trace), sorted: the evidence
    of use the reducer counts for eviction (taken from the reflections, not from the model's answer)."""
    found = {(tag.entry_id, tag.tag, r.trace_id) for r in reflections for tag in r.entry_tags if tag.tag != "neutral"}
    return [UseTag(entry_id=entry_id, tag=tag, trace_id=trace_id)  # neutral excluded above
            for entry_id, tag, trace_id in sorted(found)]


def context_version(copy: ShuffledReflection) -> int:
    """The version a batch's aggregators read as context: ``context_lag`` versions before the one it will be applied
    to, at least version 0 (the first batch reads version 0 whatever the lag). The lag is the copy's, as the batch's
    manifest recorded it, so every run, replay and restart of the same batches reads the same versions."""
    return max(0, copy.base_version - copy.context_lag)


@dataclass(frozen=True)
class AggregatorConfig:
    model: str
    window_timeout_s: float = 30.0


class Aggregator:
    """Shuffled copies in, one partial per (playbook, batch, subgroup) window out."""

    def __init__(self, config: AggregatorConfig) -> None:
        self.config = config
        self.windows = SubgroupWindows()
        self._tokens: dict[WindowKey, list[object]] = {}

    def take(self, copy: ShuffledReflection, token: object, now: float) -> tuple[list[Effect], ReadyWindow | None]:
        """A copy of a partition this stage owns: the effects now, and its window when this copy completed it."""
        outcome, ready = self.windows.add(copy, now)
        if outcome != "added":
            return [Count(f"{outcome}_copies"), *acknowledge([token])], None
        self._tokens.setdefault(SubgroupWindows.key_of(copy), []).append(token)
        return [], ready

    def expired(self, now: float) -> list[ReadyWindow]:
        """Windows open longer than ``window_timeout_s``: they close with what they have."""
        due = self.windows.expired(now, self.config.window_timeout_s)
        by_batch: dict[tuple[str, int], list[ReadyWindow]] = {}
        for ready in due:
            by_batch.setdefault(ready.key[:2], []).append(ready)
        for (playbook_id, batch_id), windows in by_batch.items():  # one line per batch, not per window
            log.warning("%s batch %d: %d window(s) closed by timeout after %.0f s with %d of %d copies "
                        "(subgroups %s)", playbook_id, batch_id, len(windows), self.config.window_timeout_s,
                        sum(len(w.copies) for w in windows), sum(w.expected_count for w in windows),
                        ", ".join(str(w.key[2]) for w in windows[:20]) + (", ..." if len(windows) > 20 else ""))
        return due

    def drop(self, keys: list[WindowKey]) -> None:
        """Windows of revoked partitions: forgotten, so their copies, delivered again, form them again."""
        self.windows.drop(keys)
        for key in keys:
            self._tokens.pop(key, None)

    async def aggregate(self, ready: ReadyWindow, role: AggregateRole, context: PlaybookContext) -> list[Effect]:
        """One call for a ready window: its partial (or, when the call fails, a dead letter and an empty partial
        with ``error``), then the acknowledgement of its copies."""
        first = ready.copies[0]
        reflections = [copy.reflection for copy in ready.copies]
        distinct = {r.reflection_id: r for r in reflections}
        fields: dict[str, Any] = dict(
            playbook_id=first.playbook_id,
            batch_id=first.batch_id,
            level=0,
            node=first.subgroup,
            k=first.k,
            base_version=first.base_version,
            items_read=len(ready.copies),
            expected_items=ready.expected_count,
            missing_items=ready.missing,
            closed_by=ready.closed_by,
            batch_closed_at=first.batch_closed_at,
            max_staleness=max(max(0, first.base_version - r.seen_version) for r in reflections),
        )
        effects: list[Effect] = []
        try:
            result = await role(reflections, await context(first.playbook_id, context_version(first)))
            partial = PartialUpdate(
                operations=result.operations,
                reflection_ids=sorted(distinct),
                trace_ids=sorted({r.trace_id for r in reflections}),
                use_tags=use_tags(reflections),
                outcomes=distinct_outcomes(r.outcome for r in reflections if r.outcome is not None),
                model=self.config.model,
                usage=result.usage,
                latency_s=result.latency_s,
                **fields,
            )
        except LLMError as error:
            traces = sorted({r.trace_id for r in reflections})
            effects.append(Reject(
                None, f"aggregation failed for window {ready.key} ({len(traces)} traces: {', '.join(traces[:20])}): "
                f"{error}; a trace whose other copies reach the version is learned anyway, the reducer dead-letters "
                "each one that is not", type(error).__name__, playbook_id=first.playbook_id))
            partial = PartialUpdate(operations=[], error=str(error)[:2000], model=self.config.model,
                                    **{**fields, "missing_items": ready.expected_count, "items_read": 0})
        return [*effects, Publish(Topic.PARTIALS, partial.playbook_id, partial), Count("partials"),
                *acknowledge(self._tokens.pop(ready.key, []))]
