"""The root reducer's logic: collect the k partials of a batch, reduce them through a bounded-fan-in scan tree,
apply the result to the playbook and describe the new version. No Kafka; the LLM call is injected."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from fractions import Fraction

from combee_core.models import (
    AppliedOperation,
    CurationState,
    Operation,
    PartialUpdate,
    PlaybookEntry,
    PlaybookVersion,
    Usage,
    VersionStats,
)
from combee_core.playbook import ApplyResult, Playbook, apply_operations, playbook_tokens
from combee_core.playbook.challenges import ChallengeRules, standing
from combee_core.playbook.meaning import Judge, LexicalJudge
from combee_core.playbook.outcomes import DEFAULT_DECAY, DEMOTION_Z, MIN_USES, distinct_outcomes, with_outcomes
from combee_core.playbook.succession import succeed_removed
from combee_core.reduce.budget import DEFAULT_MIN_EVIDENCE, added_support, change_cap, eviction_allowance, fit_to_budget
from combee_core.reduce.counts import bound_counts, count_limit
from combee_core.reduce.demotion import demote_by_outcomes
from combee_core.reduce.deterministic_merge import ContestedMerge
from combee_core.reduce.rolling import DEFAULT_ROLLING_VERSIONS, kept_apart, recent_changes, rolling_budget, said_apart
from combee_core.reduce.scan import plan_scan


@dataclass(frozen=True)
class ReduceOutcome:
    """What one reducer LLM call returned."""

    operations: list[Operation]
    usage: Usage
    latency_s: float


ReduceCall = Callable[[list[list[Operation]]], Awaitable[ReduceOutcome]]
"""Merges the operation lists of several children into one list (one LLM call)."""


@dataclass(frozen=True)
class ScanResult:
    """Root operations of a scan and what it cost."""

    operations: list[Operation]
    usage: Usage
    levels: int
    critical_path_s: float
    merged_without_call: int = 0
    """Groups merged by :func:`merge_without_conflict` instead of a reducer call."""
    narrowed_calls: int = 0
    """Groups whose reducer call read only their contested operations (:class:`ContestedMerge`)."""


MergeRule = Callable[[Sequence[list[Operation]]], "list[Operation] | ContestedMerge | None"]
"""Merges children's operation lists without an LLM call; or merges all but the contested operations
(:class:`ContestedMerge`); or returns None when a call must judge the whole group."""


async def reduce_through_scan(children: Sequence[list[Operation]], max_fan_in: int, reduce: ReduceCall,
                              merge: MergeRule | None = None) -> ScanResult:
    """Reduce leaf operation lists level by level; no call reads more than ``max_fan_in`` children.

    A single leaf needs no merge and makes no call; a group of one child passes through unchanged. With ``merge``
    (e.g. :func:`merge_without_conflict`), a group whose children do not conflict is merged by it, with no call
    and no latency; a group that conflicts falls back to the ``reduce`` call, over the whole group, or, when
    ``merge`` returns a :class:`ContestedMerge` (:func:`merge_contested`), over its contested operations only, the
    rest merged without the call. With more children than ``max_fan_in``, ``merge`` reads them all at once (it is no
    model) and only the calls for what is contested go through a tree of fan-in ``max_fan_in``.
    """
    if not children:
        raise ValueError("nothing to reduce")
    if len(children) == 1:
        return ScanResult(operations=list(children[0]), usage=Usage(), levels=0, critical_path_s=0.0)
    if merge is not None and len(children) > max_fan_in:
        flat = await _merge_flat(children, max_fan_in, reduce, merge)
        if flat is not None:
            return flat
    plan = plan_scan(len(children), max_fan_in)
    current = [list(ops) for ops in children]
    usage = Usage()
    critical_path = 0.0
    merged = narrowed = 0
    for groups in plan.levels:

        async def run_group(group: tuple[int, ...]) -> ReduceOutcome:
            nonlocal merged, narrowed
            if len(group) == 1:
                return ReduceOutcome(operations=current[group[0]], usage=Usage(), latency_s=0.0)  # noqa: B023
            if merge is not None:
                operations = merge([current[i] for i in group])  # noqa: B023 (run within its level)
                if isinstance(operations, ContestedMerge):
                    narrowed += 1
                    judged = await reduce(operations.contested)
                    return ReduceOutcome(operations=[*operations.merged, *judged.operations], usage=judged.usage,
                                         latency_s=judged.latency_s)
                if operations is not None:
                    merged += 1
                    return ReduceOutcome(operations=operations, usage=Usage(), latency_s=0.0)
            return await reduce([current[i] for i in group])  # noqa: B023

        outcomes = await asyncio.gather(*(run_group(group) for group in groups))
        usage = sum((o.usage for o in outcomes), usage)
        critical_path += max(o.latency_s for o in outcomes)
        current = [o.operations for o in outcomes]
    if len(current) != 1:
        raise AssertionError(f"scan plan ended with {len(current)} nodes instead of one root")
    return ScanResult(operations=current[0], usage=usage, levels=len(plan.levels), critical_path_s=critical_path,
                      merged_without_call=merged, narrowed_calls=narrowed)


async def _merge_flat(children: Sequence[list[Operation]], max_fan_in: int, reduce: ReduceCall,
                      merge: MergeRule) -> ScanResult | None:
    """All children merged by ``merge`` at once, the contested operations judged by reducer calls of at most
    ``max_fan_in`` children; None when ``merge`` leaves the whole group to a call (the scan then goes level by level).

    The fan-in bounds what a *model* reads; the merge is a pure function and has no such bound. Merging level by level
    would regroup each level's merged lessons by meaning again, so the lessons kept would depend on the tree's shape
    (``docs/benchmarks-history.md`` §8e); one merge over all the partials does not.
    """
    merged = merge(children)
    if merged is None:
        return None
    if not isinstance(merged, ContestedMerge):
        return ScanResult(operations=merged, usage=Usage(), levels=1, critical_path_s=0.0, merged_without_call=1)
    if len(merged.contested) <= max_fan_in:
        judged = await reduce(merged.contested)
        return ScanResult(operations=[*merged.merged, *judged.operations], usage=judged.usage, levels=1,
                          critical_path_s=judged.latency_s, narrowed_calls=1)
    scan = await reduce_through_scan(merged.contested, max_fan_in, reduce)
    return ScanResult(operations=[*merged.merged, *scan.operations], usage=scan.usage, levels=1 + scan.levels,
                      critical_path_s=scan.critical_path_s, narrowed_calls=1)


@dataclass
class _BatchPartials:
    k: int
    nodes: dict[int, PartialUpdate] = field(default_factory=dict)


class PendingPartials:
    """Level-0 partials per batch of one playbook, until all k have arrived. Redeliveries are ignored."""

    def __init__(self) -> None:
        self._batches: dict[int, _BatchPartials] = {}
        self._taken_below = 0
        """Batches based on a version below this were taken as ready (:meth:`pop_ready`): a partial of one of them
        that comes while its version is still being made (the reduce call, the version's write) is a redelivery,
        not the first partial of a batch that would never be ready (its record would never be acknowledged)."""

    def add(self, partial: PartialUpdate, current_version: int) -> bool:
        """Keep a partial; False when it is a redelivery or belongs to a batch already applied or being applied."""
        if partial.base_version < max(current_version, self._taken_below):
            return False
        batch = self._batches.setdefault(partial.batch_id, _BatchPartials(k=partial.k))
        if partial.node in batch.nodes:
            return False
        batch.nodes[partial.node] = partial
        return True

    def pop_ready(self, current_version: int) -> list[PartialUpdate] | None:
        """The complete partials of the batch based on ``current_version`` (sorted by node), or None."""
        for batch_id, batch in self._batches.items():
            first = next(iter(batch.nodes.values()))
            if first.base_version == current_version and len(batch.nodes) == batch.k:
                del self._batches[batch_id]
                self._taken_below = max(self._taken_below, current_version + 1)
                return [batch.nodes[node] for node in sorted(batch.nodes)]
        return None

    def waiting(self) -> dict[int, tuple[int, int]]:
        """batch_id -> (partials received, k)."""
        return {batch_id: (len(b.nodes), b.k) for batch_id, b in sorted(self._batches.items())}


@dataclass(frozen=True)
class NewVersion:
    """The next playbook, its published record, and what the caps refused (one line each; the reducer dead-letters
    them, so no cap is silent)."""

    playbook: Playbook
    record: PlaybookVersion
    warnings: tuple[str, ...] = ()


def use_evidence(partials: Sequence[PartialUpdate]) -> dict[str, tuple[int, int]]:
    """Per entry id, (helpful, harmful): the distinct traces of the batch whose reflections tagged the entry so
    (``PartialUpdate.use_tags``; a trace's copies in several partials count once)."""
    seen = {(tag.entry_id, tag.tag, tag.trace_id) for partial in partials for tag in partial.use_tags}
    counts: dict[str, tuple[int, int]] = {}
    for entry_id, tag, _ in seen:
        helpful, harmful = counts.get(entry_id, (0, 0))
        counts[entry_id] = (helpful + 1, harmful) if tag == "helpful" else (helpful, harmful + 1)
    return counts


def with_evidence(playbook: Playbook, evidence: dict[str, tuple[int, int]]) -> Playbook:
    """``playbook`` with each entry's ``used_helpful`` / ``used_harmful`` raised by this batch's evidence (ids it
    no longer holds are ignored). Evidence is not a change to the entry: ``updated_version`` stays."""
    if not evidence:
        return playbook
    entries: list[PlaybookEntry] = []
    for entry in playbook.entries:
        helpful, harmful = evidence.get(entry.entry_id, (0, 0))
        entries.append(entry if not (helpful or harmful) else entry.model_copy(update={
            "used_helpful": entry.used_helpful + helpful, "used_harmful": entry.used_harmful + harmful}))
    return replace(playbook, entries=tuple(entries))


def build_version(
    playbook: Playbook,
    partials: Sequence[PartialUpdate],
    scan: ScanResult,
    *,
    published_at: datetime,
    parent_version: int | None = None,
    budget_tokens: int | None = None,
    change_share: float | None = None,
    min_evidence: int = DEFAULT_MIN_EVIDENCE,
    paraphrases: bool = True,
    judge: Judge | None = None,
    outcome_decay: Fraction = DEFAULT_DECAY,
    bounded: Sequence[AppliedOperation] = (),
    rolling_share: float | None = None,
    rolling_versions: int = DEFAULT_ROLLING_VERSIONS,
    demotion_sd: float | None = DEMOTION_Z,
) -> NewVersion:
    """Apply the scan's root operations to ``playbook`` (version v) and describe version v+1.

    ``parent_version`` names the version whose entries ``playbook`` holds when that is not v (promotion: built on
    the served version after v was rejected; ``combee_core.promote.promotion.next_base``);
    ``change_share``: the share of v's entries the operations and evictions together may rewrite or remove
    (:func:`combee_core.reduce.budget.change_cap`; None: no cap);
    ``budget_tokens``: v+1 is brought within it by evictions recorded as DELETEs (:func:`fit_to_budget`), ranked
    by the batch's evidence of use (``PartialUpdate.use_tags``, counted from ``min_evidence`` traces);
    ``paraphrases``: an ADD that paraphrases an entry reinforces it (``apply_operations``; off only to measure);
    ``judge``: how an ADD is matched to entries (``apply_operations``; default: lexical, within a section);
    ``outcome_decay``: what outcome counts keep each version (``combee_core.playbook.outcomes``: the partials'
    ``outcomes``, one per distinct trace, raise the baseline and the used entries' credit after the operations);
    contradictions are weighed with ``v``'s outcomes and this batch's distinct traces
    (``combee_core.playbook.challenges``);
    ``bounded``: the records of counts the partials declared above their traces
    (:func:`combee_core.reduce.counts.bounded_leaves`), kept after the operations. The root's counts (copies) are
    counted here in the distinct traces they stand for (``ceil(count / p)``) and bounded by the batch's distinct
    traces (its lineage), and so is what one version adds to an entry's counters;
    ``rolling_share``: the rolling change budget over the last ``rolling_versions`` versions
    (:mod:`combee_core.reduce.rolling`, from ``playbook.curation``; None: none), which the operations and evictions
    share with the per-version cap. The version records the entries it changed for the next one's budget;
    ``demotion_sd``: v's entries whose agents did worse than the baseline by more than this many standard deviations
    (from ``MIN_USES`` uses) are removed after the operations, within the same caps, before the budget's evictions
    (:mod:`combee_core.reduce.demotion`; None: off)."""
    if not partials:
        raise ValueError("a version needs at least one partial")
    new_version = playbook.version + 1
    lineage = sorted({trace_id for partial in partials for trace_id in partial.trace_ids})
    reflections = {rid for partial in partials for rid in partial.reflection_ids}
    operations, cut = bound_counts(scan.operations, len(lineage), f"the distinct traces of batch "
                                   f"{partials[0].batch_id}", _copies_per_reflection(partials, len(reflections)))
    cap = None if change_share is None else change_cap(len(playbook), change_share)
    rules = ChallengeRules(batch_traces=len(lineage), baseline=playbook.baseline, min_uses=MIN_USES)
    rolling = None if rolling_share is None else rolling_budget(
        playbook, playbook.curation.recent_changes, new_version, rolling_share, rolling_versions)
    result = apply_operations(playbook, operations, new_version, max_changes=cap, paraphrases=paraphrases,
                              judge=judge, rules=rules, max_count=count_limit(len(lineage)),
                              protected=() if rolling is None else rolling.limit_of_operations())
    warnings: list[str] = []
    capped = [a for a in result.applied if a.outcome == "rejected" and a.reason.startswith(("change cap", "rolling"))]
    if capped:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(_count_kinds(capped).items()))
        warnings.append(f"change cap: {len(capped)} operation(s) ({kinds}) of version {new_version} rejected; one "
                        f"version may change at most {cap} of the {len(playbook)} entries of v{playbook.version}"
                        + ("" if rolling is None else f"; {rolling.reason()}"))
    # superseded rules are recorded after the operations, like evictions
    outcomes = distinct_outcomes(outcome for partial in partials for outcome in partial.outcomes)
    result = ApplyResult(playbook=with_outcomes(with_evidence(result.playbook, use_evidence(partials)), outcomes,
                                                outcome_decay),
                         applied=[*said_apart(result.applied), *bounded, *cut, *result.superseded,
                                  *result.succeeded, *result.consolidated],
                         changed=result.changed)
    kept_state = result.playbook
    demoted: list[str] = []
    if demotion_sd is not None:
        removed = sum(1 for entry_id in playbook.entry_ids if result.playbook.get(entry_id) is None)
        allowance = eviction_allowance(len(playbook), removed, None if cap is None else cap - len(result.changed))
        demotion = demote_by_outcomes(result.playbook, z=Fraction(str(demotion_sd)), existing=playbook.entry_ids,
                                      allowance=allowance, **({} if rolling is None else {
                                          "protected": rolling.eviction_limit(result.changed)["protected"]}))
        if demotion.flagged:
            warnings.append(f"demotion: {len(demotion.flagged)} entr(ies) of v{playbook.version} measurably worse "
                            f"than the baseline ({', '.join(demotion.flagged)}) kept by the change cap, the rolling "
                            "change budget or the majority rule; tested again next version")
        demoted = [item.entry_id for item in demotion.removals if item.entry_id is not None]
        before = {entry.entry_id: entry for entry in result.playbook.entries}
        succeeded, heirs = succeed_removed(demotion.playbook, [before[entry_id] for entry_id in demoted],
                                           new_version, judge or LexicalJudge(), "demoted by outcomes")
        result = ApplyResult(playbook=succeeded, applied=[*result.applied, *demotion.removals, *heirs],
                             changed=result.changed)
    if budget_tokens is not None:
        removed = sum(1 for entry_id in playbook.entry_ids if result.playbook.get(entry_id) is None)
        allowance = eviction_allowance(len(playbook), removed,
                                       None if cap is None else cap - len(result.changed) - len(demoted))
        fitted = fit_to_budget(result.playbook, budget_tokens, added_support(result.applied),
                               existing=playbook.entry_ids, allowance=allowance, min_evidence=min_evidence,
                               judge=judge or LexicalJudge(),
                               **({} if rolling is None else rolling.eviction_limit([*result.changed, *demoted])))
        if fitted.blocked:
            warnings.append(f"eviction: {len(fitted.blocked)} entr(ies) of v{playbook.version} kept from eviction "
                            f"by the change cap, the rolling change budget or the majority rule (at most {allowance} "
                            "more this version)")
        if fitted.over_budget:
            warnings.append(f"budget: version {new_version} stays over its {budget_tokens}-token budget "
                            f"({playbook_tokens(fitted.playbook)} tokens): the caps allow no further eviction")
        result = ApplyResult(playbook=fitted.playbook, applied=[*result.applied, *fitted.evictions],
                             changed=result.changed)
    final = replace(result.playbook, baseline=kept_state.baseline,  # the budget's playbook keeps only entries
                    challenges=standing(kept_state.challenges, result.playbook.entries))
    result = ApplyResult(playbook=final, applied=result.applied, changed=result.changed)
    kept = frozenset(result.playbook.entry_ids)
    curation = CurationState(recent_changes=recent_changes(
        playbook, kept, [*result.changed, *(e for e in playbook.entry_ids if e not in kept)],
        playbook.curation.recent_changes, new_version, rolling_versions),
        kept_apart=kept_apart(playbook, kept, result.applied, new_version))
    first = partials[0]
    usage = sum((partial.usage for partial in partials), scan.usage)
    level0_path = max(partial.latency_s for partial in partials)
    entries = list(result.playbook.entries)
    stats = VersionStats(
        batch_size=len(reflections),
        k=first.k,
        p=_copies_per_reflection(partials, len(reflections)),
        levels=1 + scan.levels,
        llm_calls=usage.calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=usage.cost_usd,
        missing_copies=sum(partial.missing_items for partial in partials),
        max_staleness=max(partial.max_staleness for partial in partials),
        delay_s=max(0.0, (published_at - first.batch_closed_at).total_seconds()),
        llm_critical_path_s=level0_path + scan.critical_path_s,
        playbook_tokens=playbook_tokens(result.playbook),
        merged_without_call=scan.merged_without_call,
    )
    parent = playbook.version if parent_version is None else parent_version
    challenges = list(final.challenges)
    content_hash = PlaybookVersion.compute_hash(
        first.playbook_id, new_version, parent, first.batch_id, entries, result.applied, lineage,
        baseline=final.baseline, challenges=challenges,
    )
    record = PlaybookVersion(
        playbook_id=first.playbook_id,
        version=new_version,
        parent_version=parent,
        batch_id=first.batch_id,
        entries=entries,
        next_entry_number=result.playbook.next_entry_number,
        operations=result.applied,
        lineage=lineage,
        baseline=final.baseline,
        challenges=challenges,
        stats=stats,
        curation=curation,
        content_hash=content_hash,
        published_at=published_at,
    )
    return NewVersion(playbook=replace(result.playbook, curation=curation), record=record, warnings=tuple(warnings))


def _count_kinds(applied: Sequence[AppliedOperation]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for item in applied:
        kinds[item.operation.op] = kinds.get(item.operation.op, 0) + 1
    return kinds


def _copies_per_reflection(partials: Sequence[PartialUpdate], distinct: int) -> int:
    if distinct == 0:
        return 0
    copies = sum(partial.items_read + partial.missing_items for partial in partials)
    return max(1, round(copies / distinct))
