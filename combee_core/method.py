"""One round of the Combee method, in memory: the processors the stages run, chained as the topics chain them.

Combee (arXiv 2604.04247, Map-Shuffle-Reduce) learns a playbook from many agents' traces at once. A round takes one
batch of traces from the playbook's version v to version v+1:

1. **reflect** (the paper's Map): one reflector call per trace, concurrently (``reflect.processor.reflect_all``);
2. **shuffle** (augmented shuffling): ``p`` copies of each reflection dealt into ``k`` subgroups, k = floor(sqrt(n))
   when a subgroup's copies fit one call of ``max_fan_in`` items, else the fewest that fit
   (``batch.batching.deal_batch``, the batcher's deal; ``batch.shuffle.aggregation_shape``);
3. **aggregate**: one aggregator call per subgroup, reading version v - ``context_lag`` (at least 0) as context, as
   the batch's copies say (``aggregate.processor.context_version``; the default lag 1 reads the version before v);
4. **reduce** (parallel scan aggregation): the k partials merged through a tree of fan-in ``max_fan_in`` and applied
   to v, with the curation, budget and caps of the reducer stage (``reduce.processor``, ``reduce.reduction``);
5. **control** (the dynamic batch-size controller, paper §3.3): the version's delay sample, and with
   ``auto_batch_size`` the next batch size (``control.processor``).

In production these five steps are five consumer groups joined by the ``reflections``, ``shuffle``, ``partials``
and ``metrics`` topics (docs/architecture.md, "The flow"); each stage decodes a record, calls the same processor and
performs its effects. Here the effects are read in memory instead, so a benchmark or a test runs the method without
Kafka and with the production defaults (fan-in 6, p = 2, the reducer's curation) unless its settings say otherwise.
``tests/unit/test_method.py`` checks that a round gives the version the processors chained as the stages chain them
give.

Pure but for what is injected, as GEPA's Combee proposer injects its language model: the three LLM roles
(:class:`LanguageModel`; ``combee_core.llm.roles.LLMRoles`` is one), the entries a trace used (the reflector's
context), the clock (``now`` of each round). The round's one random choice, the shuffle, is seeded from
``settings.run_seed`` per (playbook, batch) as the batcher seeds it (``batch.shuffle.derive_seed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from combee_core.aggregate.processor import Aggregator, AggregatorConfig, Proposal
from combee_core.batch.batching import ClosedBatch, ShuffleConfig, deal_batch
from combee_core.batch.processor import BatcherConfig
from combee_core.control.processor import Controller
from combee_core.errors import CombeeError
from combee_core.models import (
    BatchManifest,
    BatchMetrics,
    ControlDecision,
    Operation,
    PartialUpdate,
    PlaybookVersion,
    Reflection,
    Trace,
)
from combee_core.playbook import Playbook, render_playbook
from combee_core.playbook.embedding_models import embedder_from
from combee_core.processors.effects import Effect, Publish, Reject
from combee_core.reduce.processor import Reducer, ReducerConfig, ReduceRole
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.reflect.processor import UsedEntries, reflect_all
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic


class LanguageModel(Protocol):
    """The three LLM roles a round calls (``combee_core.llm.roles.LLMRoles``, or a test's or benchmark's own)."""

    async def reflect(self, trace: Trace, playbook_text: str | None = None) -> Reflection: ...

    async def aggregate(self, items: Sequence[Reflection], context: str = "") -> Proposal: ...

    async def reduce(self, partials: Sequence[Sequence[Operation]], context: str = "") -> Proposal: ...


class RoundError(CombeeError):
    """A round could not build its version (its batch did not reach the reducer whole)."""


async def no_used_entries(trace: Trace) -> str | None:
    """The reflector's context when the caller gives none: the trace alone."""
    return None


@dataclass(frozen=True)
class Round:
    """What one round did: its reflections, batch, partials, version and control decision, and every effect the
    processors answered in order (dead letters and counts included; a stage would perform them on Kafka)."""

    reflections: list[Reflection]
    batch: ClosedBatch | None
    partials: list[PartialUpdate]
    version: PlaybookVersion | None
    metrics: BatchMetrics | None
    decision: ControlDecision | None
    effects: list[Effect] = field(default_factory=list)

    @property
    def dead_letters(self) -> list[Reject]:
        return [effect for effect in self.effects if isinstance(effect, Reject)]


def published(effects: Sequence[Effect], topic: Topic) -> list[object]:
    """The models ``effects`` publish to ``topic``, in order (what the stage downstream would read)."""
    return [effect.value for effect in effects if isinstance(effect, Publish) and effect.topic == topic]


class Method:
    """The method's rounds for any number of playbooks, with the state the stages keep between them (the version
    chain, the curation's embeddings, the controller's samples). ``settings``: the run's (default: production's,
    no environment read); ``used_entries``: the entries a trace used, rendered for the reflector (the reflector
    stage reads them from the version the trace names); ``make_reducer``: the reducer processor built around the
    reduce role (default: as the reducer stage builds it from ``settings``)."""

    def __init__(self, lm: LanguageModel, settings: CombeeSettings | None = None, *,
                 used_entries: UsedEntries = no_used_entries,
                 make_reducer: Callable[[ReduceRole], Reducer] | None = None) -> None:
        self.lm = lm
        self.settings = settings if settings is not None else CombeeSettings.load(env={})
        self.used_entries = used_entries
        self.shuffle_config: ShuffleConfig = BatcherConfig.from_settings(self.settings).shuffle
        self.reducer = (make_reducer(self._reduce_role) if make_reducer is not None else
                        Reducer(ReducerConfig.from_settings(self.settings), self._reduce_role,
                                embedder_from(self.settings)))
        self.logs = ReducerLogs()
        self.controller = Controller(self.settings)
        self._before: dict[str, Playbook] = {}
        """Per playbook, the version before the newest (the aggregators' context with ``context_lag`` 1)."""

    def playbook(self, playbook_id: str) -> Playbook:
        """The playbook's newest version (empty before its first round)."""
        return self.logs.playbook(playbook_id)

    async def round(self, playbook_id: str, traces: Sequence[Trace], *, now: datetime,
                    between: Callable[[list[PartialUpdate]], list[PartialUpdate]] | None = None) -> Round:
        """One batch of ``traces`` (run with the newest version) to the next version. ``between``: a change of the
        partials before the reduce (a benchmark's oracle; production has none). A round whose traces all failed
        to reflect builds no version."""
        reflections, effects = await self.reflect(traces)
        if not reflections:
            return Round([], None, [], None, None, None, effects)
        batch = self.shuffle(playbook_id, reflections, now=now)
        partials, aggregated = await self.aggregate(batch)
        if between is not None:
            partials = between(partials)
        version, reduced = await self.reduce(partials, batch.manifest, now=now)
        [metrics] = published(reduced, Topic.METRICS)
        assert isinstance(metrics, BatchMetrics)
        decision, controlled = self.control(metrics, now=now)
        return Round(reflections, batch, partials, version, metrics, decision,
                     [*effects, *aggregated, *reduced, *controlled])

    async def reflect(self, traces: Sequence[Trace]) -> tuple[list[Reflection], list[Effect]]:
        """Map: a reflection per trace, in input order; a trace whose reflection failed is a dead letter."""
        answered = await reflect_all([(trace, index) for index, trace in enumerate(traces)], self.lm.reflect,
                                     self.used_entries)
        effects = [effect for _, part in answered for effect in part]
        reflections = [r for r in published(effects, Topic.REFLECTIONS) if isinstance(r, Reflection)]
        return reflections, effects

    def shuffle(self, playbook_id: str, reflections: list[Reflection], *, now: datetime) -> ClosedBatch:
        """Augmented shuffling of the round's batch, built on the newest version (batch b builds version b+1)."""
        batch = deal_batch(playbook_id, self.playbook(playbook_id).version, reflections, self.shuffle_config,
                           target_batch_size=len(reflections), closed_by="size", closed_at=now)
        self.logs.take_manifest(batch.manifest)
        return batch

    async def aggregate(self, batch: ClosedBatch) -> tuple[list[PartialUpdate], list[Effect]]:
        """One aggregator call per subgroup window, concurrently, with the version its copies name as context."""
        aggregator = Aggregator(AggregatorConfig(model=self.settings.aggregator_model,
                                                 window_timeout_s=self.settings.window_timeout_s))
        effects: list[Effect] = []
        ready = []
        for token, copy in enumerate(batch.copies):
            taken, window = aggregator.take(copy, token, 0.0)
            effects += taken
            if window is not None:
                ready.append(window)
        async def as_context(playbook_id: str, version: int) -> str:
            playbook = self._at(playbook_id, version)
            return render_playbook(playbook, self.settings.llm_context_tokens).text if self.settings.llm_context else ""

        for answered in await asyncio.gather(*(aggregator.aggregate(w, self.lm.aggregate, as_context)
                                               for w in ready)):
            effects += answered
        partials = [p for p in published(effects, Topic.PARTIALS) if isinstance(p, PartialUpdate)]
        return partials, effects

    async def reduce(self, partials: list[PartialUpdate], manifest: BatchManifest | None, *,
                     now: datetime) -> tuple[PlaybookVersion, list[Effect]]:
        """Parallel scan aggregation of a batch's partials, applied to the version they build on (``manifest``: the
        batch's, which the version's lineage is checked against; None: not checked, with a warning)."""
        if not partials:
            raise RoundError("a version needs at least one partial")
        playbook_id = partials[0].playbook_id
        base = self.logs.base(playbook_id)
        if base is None:
            raise RoundError(f"{playbook_id}: no version to build on (promotion decides it; rounds run without)")
        playbook, parent_version = base
        effects: list[Effect] = []
        for token, partial in enumerate(partials):
            effects += self.reducer.take(partial, token, playbook.version) or []
        ready = self.reducer.ready(playbook_id, playbook.version)
        if ready is None:
            raise RoundError(f"{playbook_id} batch {partials[0].batch_id}: its {len(partials)} partials are not "
                             f"the batch's k = {partials[0].k}")
        previous_at = self.logs.published_at.get(playbook_id) if playbook.version > 0 else None
        effects += await self.reducer.next_version(playbook, ready, parent_version=parent_version,
                                                   manifest=manifest, previous_at=previous_at, now=now)
        [version] = published(effects, Topic.PLAYBOOK)
        assert isinstance(version, PlaybookVersion)
        self._before[playbook_id] = self.playbook(playbook_id)
        self.logs.take_version(version)
        return version, effects

    def _at(self, playbook_id: str, version: int) -> Playbook:
        """Version ``version`` of the playbook: the newest or the one before (a round reads no other)."""
        for playbook in (self.playbook(playbook_id), self._before.get(playbook_id)):
            if playbook is not None and playbook.version == version:
                return playbook
        raise RoundError(f"{playbook_id} v{version} is neither the newest version nor the one before")

    def control(self, metrics: BatchMetrics, *, now: datetime) -> tuple[ControlDecision | None, list[Effect]]:
        """The controller's sample of the version, and its decision when it chose a new batch size."""
        effects = self.controller.take(metrics, None, now)
        decisions = [d for d in published(effects, Topic.CONTROL) if isinstance(d, ControlDecision)]
        return (decisions[-1] if decisions else None), effects

    async def _reduce_role(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        result = await self.lm.reduce(children, context)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)
