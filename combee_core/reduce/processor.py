"""The root reducer's decisions: which partials count (one per (batch, node), none of a batch already applied or being
applied), when a batch is ready, and what its version publishes: the version itself (a numbered record), a dead letter
for each trace of the batch that no partial read, the batch's metrics for the controller, then the acknowledgement of
its partials.

Pure but for the reducer LLM role, which is injected (``reduce(children, context)``); a failed call is replaced by
the union of its children's operations and a dead letter saying so, so a batch is never lost. The stage keeps the
live views (the playbook each version builds on, the batches' manifests, the promotion ledger) and the task that
applies ready batches one after the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from combee_core.batch.shuffle import DEFAULT_CALL_CAPACITY
from combee_core.llm.errors import LLMError
from combee_core.llm.simulator import is_sim_model
from combee_core.model_notice import EmptyVersionNotice
from combee_core.models import (
    AddOp,
    AppliedOperation,
    BatchManifest,
    BatchMetrics,
    Operation,
    PartialUpdate,
    PlaybookVersion,
    Usage,
)
from combee_core.playbook import Playbook, render_playbook
from combee_core.playbook.aliases import alias_texts
from combee_core.playbook.embedding import Embedder, EmbeddingCache, EmbeddingError
from combee_core.playbook.meaning import Judge, SemanticJudge
from combee_core.playbook.outcomes import DEMOTION_Z
from combee_core.playbook.uncertain import UncertainJudge, contest_uncertain_adds, kept_pairs
from combee_core.processors.effects import Count, Effect, Publish, Reject, acknowledge
from combee_core.reduce.budget import DEFAULT_MIN_EVIDENCE
from combee_core.reduce.call_guard import answer_within_evidence
from combee_core.reduce.counts import bounded_leaves
from combee_core.reduce.deterministic_merge import ContestedMerge, merge_contested
from combee_core.reduce.reducer_state import StalledBatch
from combee_core.reduce.reduction import PendingPartials, ReduceOutcome, build_version, reduce_through_scan
from combee_core.reduce.rolling import DEFAULT_ROLLING_VERSIONS
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

log = logging.getLogger(__name__)

ReduceRole = Callable[[list[list[Operation]], str], Awaitable[ReduceOutcome]]
"""The reducer LLM role: merge children's operation lists, given the playbook rendered as context (may raise
``LLMError``)."""


@dataclass(frozen=True)
class ReducerConfig:
    max_fan_in: int = DEFAULT_CALL_CAPACITY
    deterministic_merge: bool = True
    budget_tokens: int | None = None
    change_cap: float | None = None
    min_evidence: int = DEFAULT_MIN_EVIDENCE
    rolling_share: float | None = None
    """The rolling change budget's share (``combee_core.reduce.rolling``; None: none)."""
    rolling_versions: int = DEFAULT_ROLLING_VERSIONS
    demotion_sd: float | None = DEMOTION_Z
    """Entries whose agents do worse than the baseline by more than this many sd are removed
    (``combee_core.reduce.demotion``; None: off)."""
    llm_context: bool = True
    llm_context_tokens: int = 4000
    same_meaning: float | None = None
    """None: the embedding model's own threshold."""
    ask_reducer: bool = False
    """Lessons the judge calls one by closeness in meaning alone go to the reducer call, whose verdict stands
    (:mod:`combee_core.playbook.uncertain`): on when a real LLM answers the reducer role."""
    paraphrases: bool = True
    """An ADD that paraphrases an entry reinforces it (``build_version``); off only to measure (``bench.learning``)."""

    @classmethod
    def from_settings(cls, settings: CombeeSettings) -> ReducerConfig:
        """The reducer stage's configuration (the stage and the benchmarks that mirror it build it here)."""
        return cls(
            max_fan_in=settings.max_fan_in, deterministic_merge=settings.deterministic_merge,
            budget_tokens=settings.playbook_budget_tokens, change_cap=settings.playbook_change_cap,
            min_evidence=settings.eviction_min_evidence, rolling_share=settings.playbook_rolling_change_cap,
            rolling_versions=settings.playbook_rolling_versions, demotion_sd=settings.playbook_demotion_sd or None,
            llm_context=settings.llm_context, llm_context_tokens=settings.llm_context_tokens,
            same_meaning=settings.same_meaning, ask_reducer=not is_sim_model(settings.reducer_model),
        )


def batch_metrics(version: PlaybookVersion, previous_at: datetime | None) -> BatchMetrics:
    """The controller's sample of a new version: its batch's size, k, delays and calls; ``round_s`` is the time
    since the previous version was published (None for the first version, or when it is not known)."""
    stats = version.stats
    return BatchMetrics(
        playbook_id=version.playbook_id,
        batch_id=version.batch_id,
        version=version.version,
        batch_size=max(1, stats.batch_size),
        k=max(1, stats.k),
        delay_s=stats.delay_s,
        llm_critical_path_s=stats.llm_critical_path_s,
        llm_calls=stats.llm_calls,
        round_s=max(0.0, (version.published_at - previous_at).total_seconds()) if previous_at else None,
        batch_closed_at=version.published_at - timedelta(seconds=stats.delay_s),
    )


def unlearned(version: PlaybookVersion, manifest: BatchManifest | None) -> list[Effect]:
    """A dead letter for each trace of the batch's manifest that no partial read (every copy's window timed out or
    failed), so every batched trace ends in exactly one version's lineage or a dead letter."""
    learned = set(version.lineage)
    return [Reject(None, f"trace {trace_id} of batch {version.batch_id} reached no aggregator (its windows closed by "
                   f"timeout or failed): not learned, not in version {version.version}", "NotLearned",
                   trace_id=trace_id, playbook_id=version.playbook_id)
            for trace_id in (manifest.trace_ids if manifest is not None else ()) if trace_id not in learned]


class Reducer:
    """Partials in, versions out, per playbook, in version order."""

    def __init__(self, config: ReducerConfig, reduce: ReduceRole, embedder: Embedder | None = None,
                 empty_notice: EmptyVersionNotice | None = None) -> None:
        """``embedder``: curation by meaning (``SemanticJudge``); None: the lexical judge, within a section.
        ``empty_notice``: says when versions come out empty because the reflector is the simulator."""
        self.config = config
        self._reduce = reduce
        self._embedder = embedder
        self._embeddings: dict[str, EmbeddingCache] = {}
        """Per playbook, the vectors of its latest version's entries (each embedded once) and of the batch's ADDs."""
        self.pending: dict[str, PendingPartials] = {}
        self._tokens: dict[tuple[str, int], list[object]] = {}
        self._empty_notice = empty_notice or EmptyVersionNotice(reflector_model="")

    def take(self, partial: PartialUpdate, token: object, current_version: int) -> list[Effect] | None:
        """A partial of a playbook this stage owns, whose latest version is ``current_version``: the effects of a
        redelivery (acknowledged now), or None when it is kept (its batch may now be ready)."""
        pending = self.pending.setdefault(partial.playbook_id, PendingPartials())
        if not pending.add(partial, current_version):
            return [Count("duplicate_partials"), *acknowledge([token])]
        self._tokens.setdefault((partial.playbook_id, partial.batch_id), []).append(token)
        return None

    def ready(self, playbook_id: str, base_version: int) -> list[PartialUpdate] | None:
        """The complete partials (by node) of the batch that applies to ``base_version``, or None."""
        pending = self.pending.get(playbook_id)
        return pending.pop_ready(base_version) if pending is not None else None

    def judge(self, playbook_id: str) -> SemanticJudge | None:
        """The judge of a playbook's curation: by meaning with an embedder (its cache kept across versions)."""
        if self._embedder is None:
            return None
        cache = self._embeddings.setdefault(playbook_id, EmbeddingCache(self._embedder))
        return SemanticJudge(cache, self.config.same_meaning)

    def _keep_embeddings(self, playbook_id: str, contents: Sequence[str]) -> None:
        if (cache := self._embeddings.get(playbook_id)) is not None:
            cache.retain(contents)

    def release(self, playbook_id: str) -> None:
        """The playbook's partition was revoked: its partials come back to the next owner."""
        self.pending.pop(playbook_id, None)
        self._embeddings.pop(playbook_id, None)
        for key in [key for key in self._tokens if key[0] == playbook_id]:
            del self._tokens[key]

    def published(self, effects: list[Effect], now: float) -> None:
        """The version of :meth:`next_version`'s ``effects`` counted (``now``: monotonic seconds): say so, and warn
        when versions come out empty because the reflector is the simulator (``combee_core.model_notice``)."""
        [record] = [e.value for e in effects if isinstance(e, Publish) and e.topic == Topic.PLAYBOOK]
        assert isinstance(record, PlaybookVersion)
        log.info("published %s v%d (batch %d, %d entries, %d ops, delay %.2fs)", record.playbook_id, record.version,
                 record.batch_id, len(record.entries), len(record.operations), record.stats.delay_s)
        if notice := self._empty_notice.observe(record.playbook_id, record.version, len(record.operations),
                                                len(record.lineage), now):
            log.warning("%s", notice)

    def stalled(self, batches: list[StalledBatch]) -> list[Effect]:
        """Warn of each batch that has waited too long for its version (``ReducerLogs.stalled``), and count it."""
        for stalled in batches:
            waiting = self.pending.get(stalled.playbook_id, PendingPartials()).waiting()
            log.warning("%s: batch %d (%d traces) closed %.0f s ago and is still not a version (partials %s)",
                        stalled.playbook_id, stalled.manifest.batch_id, stalled.manifest.n, stalled.age_s,
                        waiting.get(stalled.manifest.batch_id, "none"))
        return [Count("stalled_batches") for _ in batches]

    async def next_version(self, playbook: Playbook, partials: list[PartialUpdate], *, parent_version: int | None,
                           manifest: BatchManifest | None, previous_at: datetime | None,
                           now: datetime) -> list[Effect]:
        """Reduce a ready batch's partials through the scan, apply them to ``playbook`` and say what to publish."""
        effects: list[Effect] = []
        first = partials[0]
        if manifest is None:
            log.warning("%s batch %d: manifest not found; the version's lineage is not checked against it",
                        first.playbook_id, first.batch_id)
        context = render_playbook(playbook, self.config.llm_context_tokens).text if self.config.llm_context else ""

        guarded: list[AppliedOperation] = []

        async def reduce(children: list[list[Operation]]) -> ReduceOutcome:
            try:
                outcome = await self._reduce(children, context)
            except LLMError as error:
                effects.append(Reject(None, f"reduce call failed for batch {first.batch_id}; applying the union of "
                                      f"{len(children)} children's operations unmerged: {error}",
                                      type(error).__name__, playbook_id=first.playbook_id))
                return ReduceOutcome(operations=[op for ops in children for op in ops], usage=Usage(), latency_s=0.0)
            if not self.config.ask_reducer:
                return outcome
            # a model's answer changes only what the operations it was given back (combee_core.reduce.call_guard)
            operations, cut = answer_within_evidence(children, outcome.operations, judge, playbook.entries)
            guarded.extend(cut)
            return ReduceOutcome(operations=operations, usage=outcome.usage, latency_s=outcome.latency_s)

        judge = self.judge(playbook.playbook_id)
        if judge is not None:
            texts = [e.content for e in playbook.entries] + alias_texts(playbook.entries)
            texts += [op.content for partial in partials for op in partial.operations if isinstance(op, AddOp)]
            texts += [challenge.content for challenge in playbook.challenges]
            try:
                # each text embedded once, in one call (in a thread: a hosted model's request or the offline
                # model's forward pass must not hold the event loop, its heartbeats and other stages); the
                # comparisons then read the cache
                await asyncio.to_thread(judge.prepare, texts)
            except EmbeddingError as error:
                effects.append(Reject(None, f"embedding model {judge.cache.embedder.name} failed for batch "
                                      f"{first.batch_id}: {error}; this version is curated lexically",
                                      type(error).__name__, playbook_id=first.playbook_id))
                judge = None

        kept = [(pair.entry_id, pair.content) for pair in playbook.curation.kept_apart]
        asking = judge is not None and self.config.ask_reducer
        if judge is not None and asking:
            merge_judge, kept_before = UncertainJudge.contesting(judge), kept_pairs(playbook.entries, kept)

            def merge(children: Sequence[list[Operation]]) -> list[Operation] | ContestedMerge:
                return contest_uncertain_adds(merge_contested(children, judge=merge_judge), playbook.entries, judge,
                                              kept_before)
        else:
            def merge(children: Sequence[list[Operation]]) -> list[Operation] | ContestedMerge:
                return merge_contested(children, judge=judge)

        leaves, bounded = bounded_leaves(partials)
        leaves = [[op.model_copy(update={"distinct_from": []}) if isinstance(op, AddOp) and op.distinct_from else op
                   for op in ops] for ops in leaves]  # a keep-apart decision is the root reducer call's alone
        if asking and len(leaves) == 1 and self.config.deterministic_merge:
            leaves.append([])  # a single leaf is never merged: an empty sibling lets its uncertain ADDs reach the call
        scan = await reduce_through_scan(
            leaves, self.config.max_fan_in, reduce,
            merge=merge if self.config.deterministic_merge else None,
        )
        apply_judge: Judge | None = judge
        if judge is not None and asking:  # the call's explicit keep-both decisions, and earlier ones, stand
            apply_judge = UncertainJudge.trusting(judge, kept_pairs(playbook.entries, kept, scan.operations))
        built = build_version(playbook, partials, scan, published_at=now, parent_version=parent_version,
                              budget_tokens=self.config.budget_tokens, change_share=self.config.change_cap,
                              min_evidence=self.config.min_evidence, paraphrases=self.config.paraphrases,
                              judge=apply_judge, bounded=[*bounded, *guarded],
                              rolling_share=self.config.rolling_share, rolling_versions=self.config.rolling_versions,
                              demotion_sd=self.config.demotion_sd)
        record = built.record
        playbook_id = playbook.playbook_id
        for warning in built.warnings:
            log.warning("%s: %s", playbook_id, warning)
        self._keep_embeddings(playbook_id, [*(entry.content for entry in record.entries), *alias_texts(record.entries),
                                            *(challenge.content for challenge in record.challenges)])
        return [
            *effects,
            Publish(Topic.PLAYBOOK, playbook_id, record, number=(playbook_id, record.version)),
            *(Reject(None, warning, "ChangeCapReached" if warning.startswith("change cap") else "EvictionLimited",
                     playbook_id=playbook_id) for warning in built.warnings),
            *unlearned(record, manifest),
            Publish(Topic.METRICS, playbook_id, batch_metrics(record, previous_at)),
            Count("versions"),
            *acknowledge(self._tokens.pop((playbook_id, record.batch_id), [])),
        ]
