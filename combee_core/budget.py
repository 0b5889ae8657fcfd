"""The playbook's size budget and the per-version removal cap.

A version that would go over its token budget (:func:`combee_core.playbook.playbook_tokens`, ``ceil(chars / 4)``
of the rendered playbook) evicts entries by value until it fits; each eviction is recorded in the version as an
applied ``DELETE`` with its reason. The removal cap bounds what the *model's* operations may remove in one version
(``DELETE`` and the ids a ``MERGE`` folds away), so no batch of traces can talk a model into wiping the playbook;
it is enforced by :func:`combee_core.playbook.apply_operations` (``max_removals``). Evictions are not counted
against the cap: they remove only what the budget requires, the lowest-valued entries first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from combee_core.models import AppliedOperation, DeleteOp, PlaybookEntry
from combee_core.playbook import Playbook, entry_sort_key, playbook_tokens

DEFAULT_BUDGET_TOKENS = 8_000
"""Default playbook budget: ~32,000 characters, a few hundred entries; an order of magnitude below the 100K-token
playbooks ACE's users report degrading validation accuracy, and small enough to send whole as context."""
DEFAULT_DELETE_CAP = 0.25
"""Default share of the previous version's entries one version's operations may remove (at least one entry)."""


def removal_cap(entries_before: int, share: float) -> int:
    """Entries of a playbook of ``entries_before`` entries one version may remove: ``max(1, floor(share * n))``."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the delete cap is a share in [0, 1], got {share}")
    return max(1, math.floor(share * entries_before))


def eviction_key(entry: PlaybookEntry, support: int = 0) -> tuple[int, int, int, int, tuple[str, int, str]]:
    """Lowest first: value (``helpful - harmful``), then ``support`` (reflections that backed the entry's ADD in
    this version: a new entry has no counters yet), then the version it last changed in (stale before fresh), then
    its creation version, then playbook order."""
    return (entry.helpful - entry.harmful, support, entry.updated_version, entry.created_version,
            entry_sort_key(entry))


def fit_to_budget(playbook: Playbook, budget_tokens: int, support: Mapping[str, int] | None = None
                  ) -> tuple[Playbook, list[AppliedOperation]]:
    """The playbook within ``budget_tokens``, evicting the lowest-valued entries (:func:`eviction_key`, with
    ``support`` per entry id) one by one until it fits, and the applied ``DELETE`` operations recording each
    eviction and why. Unchanged when it fits."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    tokens = playbook_tokens(playbook)
    if tokens <= budget_tokens:
        return playbook, []
    evicted: dict[str, None] = {}
    applied: list[AppliedOperation] = []
    remaining = list(playbook.entries)
    support = support or {}
    for entry in sorted(playbook.entries, key=lambda e: eviction_key(e, support.get(e.entry_id, 0))):
        evicted[entry.entry_id] = None
        remaining = [e for e in remaining if e.entry_id != entry.entry_id]
        applied.append(AppliedOperation(
            operation=DeleteOp(entry_id=entry.entry_id),
            outcome="applied",
            reason=(f"evicted: the version was over its {budget_tokens}-token budget ({tokens} tokens); lowest value "
                    f"(helpful {entry.helpful} - harmful {entry.harmful}, support {support.get(entry.entry_id, 0)}, "
                    f"last changed in v{entry.updated_version})"),
            entry_id=entry.entry_id,
        ))
        tokens = playbook_tokens(Playbook(playbook.playbook_id, playbook.version, tuple(remaining),
                                          playbook.next_entry_number))
        if tokens <= budget_tokens:
            break
    fitted = Playbook(playbook.playbook_id, playbook.version, tuple(remaining), playbook.next_entry_number)
    return fitted, applied


def added_support(applied: list[AppliedOperation]) -> dict[str, int]:
    """Per entry id, the support of the ADDs that created or reinforced it in these applied operations."""
    support: dict[str, int] = {}
    for item in applied:
        op = item.operation
        if item.outcome == "applied" and item.entry_id is not None and op.op == "ADD":
            support[item.entry_id] = support.get(item.entry_id, 0) + op.support
    return support
