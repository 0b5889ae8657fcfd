"""The playbook's size budget, the per-version change cap, and eviction by evidence of use.

**One change cap per version.** Everything that rewrites or removes an entry of the previous version counts against
one cap, ``max(1, floor(share x entries))`` (:func:`change_cap`): the model's UPDATE, MERGE and DELETE operations
(enforced by :func:`combee_core.playbook.apply_operations`, ``max_changes``) and the budget's evictions (here), each
entry once. ADD and TAG change counters, never an entry's text, and are not counted. What is over the cap is
rejected with the reason (and the reducer says so in a dead letter), so no batch of traces, and no model that obeys
one, can rewrite the playbook wholesale.

**Eviction by outcome credit, then evidence of use.** A version over its token budget
(:func:`combee_core.playbook.playbook_tokens`, ``ceil(chars / 4)`` of the rendered playbook) evicts entries one by
one, lowest :func:`eviction_key` first, until it fits. An entry's value is first its outcome credit
(:func:`outcome_value`: successes above the playbook's baseline among the traces whose agents used it, from the
traces' own outcomes, ``combee_core.playbook.outcomes``), then what agents that *used* it report
(``used_helpful`` / ``used_harmful``: distinct traces, from the reflections' entry tags, never from the model's TAG
counts or restatements); each counts only from ``min_evidence`` (decayed) uses or distinct traces on
(:func:`use_value`), so fewer traces cannot evict or protect an entry. Restatement (an ADD reinforcing an entry) is
support: a tie-breaker among equal values, never value; then the fewer uses go first, then the newest entry (an
entry no evidence tells apart from another: the one agents have run with longer stays; never oldest-first).
**A lesson's last entry goes last.** With a ``judge``, eviction first takes only entries another remaining entry
restates (the judge calls them one lesson), in that ranking; a lesson's last entry is reached only when no such
entry can go (:mod:`combee_core.playbook.eviction`): a lesson held twice costs tokens, a lesson lost is never served.
Evictions of existing entries count against the change cap and never remove a majority of the previous version's
entries; entries new in this version are not existing entries and may always be evicted. When neither
kind can go, the version stays over budget and the caller warns.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from combee_core.models import AppliedOperation, DeleteOp, OutcomeTally, PlaybookEntry
from combee_core.playbook import Playbook, entry_sort_key, playbook_tokens
from combee_core.playbook.eviction import is_spare, restated_by
from combee_core.playbook.meaning import Judge
from combee_core.playbook.outcomes import UNIT, credit

DEFAULT_BUDGET_TOKENS = 8_000
"""Default playbook budget: ~32,000 characters, a few hundred entries; an order of magnitude below the 100K-token
playbooks ACE's users report degrading validation accuracy, and small enough to send whole as context."""
DEFAULT_CHANGE_CAP = 0.25
"""Default share of the previous version's entries one version may rewrite or remove (at least one entry)."""
DEFAULT_MIN_EVIDENCE = 10
"""Default distinct traces a verdict (helpful or harmful) needs before it counts for eviction. A success rate
estimated from n uses has a standard error up to 0.5 / sqrt(n): 0.16 at n = 10, so a rate from fewer traces cannot
tell a misleading entry from bad luck, and a handful of crafted traces cannot evict an entry."""

EvictionKey = tuple[Fraction, float, int, Fraction, int, tuple[str, int, str]]


def change_cap(entries_before: int, share: float) -> int:
    """Entries of a playbook of ``entries_before`` entries one version may change: ``max(1, floor(share * n))``."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the change cap is a share in [0, 1], got {share}")
    return max(1, math.floor(share * entries_before))


def counted(count: int, min_evidence: int) -> int:
    """A verdict's count as eviction sees it: the count from ``min_evidence`` distinct traces on, else 0."""
    return count if count >= min_evidence else 0


def use_value(entry: PlaybookEntry, min_evidence: int = DEFAULT_MIN_EVIDENCE) -> float:
    """The entry's value from evidence of use, in [-1, 1]: (helpful - harmful) / (helpful + harmful) over the
    verdicts that count (:func:`counted`); 0 when none counts (unknown, as good as unproven)."""
    helpful, harmful = counted(entry.used_helpful, min_evidence), counted(entry.used_harmful, min_evidence)
    return (helpful - harmful) / (helpful + harmful) if helpful + harmful else 0.0


def outcome_value(entry: PlaybookEntry, baseline: OutcomeTally, min_evidence: int = DEFAULT_MIN_EVIDENCE) -> Fraction:
    """The entry's outcome credit as eviction sees it: successes above the ``baseline`` among its uses, in traces
    (``Credit.excess``: negative when its agents fail more often than the playbook's), from ``min_evidence``
    (decayed) uses on, else 0 (unknown)."""
    found = credit(entry.outcome, baseline)
    return found.excess if found.uses >= min_evidence else Fraction(0)


def eviction_key(entry: PlaybookEntry, support: int = 0, min_evidence: int = DEFAULT_MIN_EVIDENCE,
                 baseline: OutcomeTally | None = None) -> EvictionKey:
    """Lowest first: :func:`outcome_value` against ``baseline`` (the playbook's), then :func:`use_value`, then
    ``support`` (reflections that backed the entry's ADD in this version: restatement breaks ties, it is not value),
    then the (decayed) uses (the least used first), then the newest first, then playbook order."""
    uses = Fraction(entry.outcome.successes + entry.outcome.failures, UNIT)
    return (outcome_value(entry, baseline or OutcomeTally(), min_evidence), use_value(entry, min_evidence), support,
            uses, -entry.created_version, entry_sort_key(entry))


@dataclass(frozen=True)
class Fitted:
    """A playbook brought toward its budget: the result, the evictions (applied DELETEs with their reasons), the
    existing entries the caps kept from being evicted, and whether it is still over budget."""

    playbook: Playbook
    evictions: list[AppliedOperation]
    blocked: list[str]
    over_budget: bool


def eviction_allowance(entries_before: int, removed_before: int, changes_left: int | None) -> int:
    """Existing entries eviction may still remove: the change cap's remainder, and never so many that the version
    loses a majority of the previous version's ``entries_before`` entries (``removed_before`` are gone already)."""
    majority_left = max(0, entries_before // 2 - removed_before)
    return majority_left if changes_left is None else max(0, min(changes_left, majority_left))


def fit_to_budget(playbook: Playbook, budget_tokens: int, support: Mapping[str, int] | None = None, *,
                  existing: Collection[str] = (), allowance: int | None = None,
                  min_evidence: int = DEFAULT_MIN_EVIDENCE,
                  protected: Sequence[tuple[frozenset[str], int]] = (), judge: Judge | None = None) -> Fitted:
    """The playbook within ``budget_tokens`` if the caps allow: entries evicted one by one, lowest
    :func:`eviction_key` first (``support`` per entry id), until it fits; with a ``judge``, entries another
    remaining entry restates first, a lesson's last entry only when none of those can go
    (:mod:`combee_core.playbook.eviction`). Of the ``existing`` entries (those of the previous version) at most
    ``allowance`` are evicted (None: no limit); past it they are skipped, recorded in ``blocked``, and the next
    candidates go; so is an entry of a ``protected`` set once that set's allowance is spent (the rolling change
    budget, ``combee_core.reduce.rolling``). Unchanged when it fits."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    tokens = playbook_tokens(playbook)
    if tokens <= budget_tokens:
        return Fitted(playbook, [], [], False)
    support = support or {}
    existing = frozenset(existing)
    restated = {} if judge is None else restated_by(playbook.entries, judge)
    left = [allowed for _, allowed in protected]
    applied: list[AppliedOperation] = []
    blocked: list[str] = []
    remaining = list(playbook.entries)
    kept = {entry.entry_id for entry in playbook.entries}
    evicted_existing = 0
    ranked = sorted(playbook.entries,
                    key=lambda e: eviction_key(e, support.get(e.entry_id, 0), min_evidence, playbook.baseline))
    for spare_only in ((True, False) if restated else (False,)):
        for entry in ranked:
            if tokens <= budget_tokens:
                break
            if entry.entry_id not in kept or entry.entry_id in blocked:
                continue
            spare = is_spare(entry.entry_id, kept, restated)
            if spare_only and not spare:
                continue
            is_existing = entry.entry_id in existing
            guarded = [n for n, (ids, _) in enumerate(protected) if entry.entry_id in ids]
            if (is_existing and allowance is not None and evicted_existing >= allowance) or any(
                    left[n] <= 0 for n in guarded):
                blocked.append(entry.entry_id)
                continue
            evicted_existing += is_existing
            for n in guarded:
                left[n] -= 1
            kept.discard(entry.entry_id)
            remaining = [e for e in remaining if e.entry_id != entry.entry_id]
            lesson = ("; another entry states its lesson" if spare else
                      "; no entry that another restates could go" if restated else "")
            applied.append(AppliedOperation(
                operation=DeleteOp(entry_id=entry.entry_id),
                outcome="applied",
                reason=(f"evicted: the version was over its {budget_tokens}-token budget ({tokens} tokens); lowest "
                        f"value (outcome {credit(entry.outcome, playbook.baseline).describe()}, counted from "
                        f"{min_evidence} uses; use {use_value(entry, min_evidence):+.2f} from helpful "
                        f"{entry.used_helpful} / harmful {entry.used_harmful} traces, counted from {min_evidence}; "
                        f"support {support.get(entry.entry_id, 0)}; created in v{entry.created_version}){lesson}"),
                entry_id=entry.entry_id,
            ))
            tokens = playbook_tokens(replace(playbook, entries=tuple(remaining)))
    fitted = replace(playbook, entries=tuple(remaining))
    return Fitted(fitted, applied, blocked, tokens > budget_tokens)


def added_support(applied: list[AppliedOperation]) -> dict[str, int]:
    """Per entry id, the support of the ADDs that created or reinforced it in these applied operations."""
    support: dict[str, int] = {}
    for item in applied:
        op = item.operation
        if item.outcome == "applied" and item.entry_id is not None and op.op == "ADD":
            support[item.entry_id] = support.get(item.entry_id, 0) + op.support
    return support
