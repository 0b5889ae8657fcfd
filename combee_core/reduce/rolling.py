"""The rolling change budget: beside the per-version change cap, what a run of versions may change of the playbook as
it stood before them.

The per-version cap lets each batch change a share of the version it applies to, so a run of hostile batches
compounds (four at 0.25 change 1 - 0.75^4 = 68% of the entries). So for every run of versions that ends with the one
being built and spans at most ``window`` versions, the run may rewrite or remove at most ``max(1, floor(share x n))``
of the ``n`` entries of the version before it, whatever does it (UPDATE, MERGE, DELETE, a superseding ADD,
eviction); entries created within a run are bounded by the per-version cap (and the shorter runs) only. The state is
the entries each version changed (``CurationState.recent_changes``), recorded in the version itself, so a restarted
reducer or a replay decides as one that never stopped. The other part of that state, the pairs a reducer call kept
apart (:func:`kept_apart`), is carried the same way.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from combee_core.models import AddOp, AppliedOperation, ChangedEntry, KeptApart, PlaybookEntry, VersionChanges
from combee_core.playbook import Playbook
from combee_core.playbook.working_playbook import ProtectedLimit

DEFAULT_ROLLING_SHARE = 0.4
"""Default share of the entries before the window that the window's versions may change together: less than half, so
no run of batches removes most of a playbook within the window."""
DEFAULT_ROLLING_VERSIONS = 8
"""Default window: the version being built and the 7 before it."""


@dataclass(frozen=True)
class RunLimit:
    """One run of versions, from ``base_version + 1`` to the one being built: of the ``base_entries`` entries of
    ``base_version`` (those of the parent created by then: ``protected``, and those the run removed already), at most
    ``limit`` may change; ``allowed`` are left for the version being built."""

    base_version: int
    protected: frozenset[str]
    base_entries: int
    limit: int
    allowed: int

    def reason(self) -> str:
        return (f"rolling change budget: the versions after v{self.base_version} may change at most {self.limit} "
                f"of its {self.base_entries} entries, {self.limit - self.allowed} changed before this version")


@dataclass(frozen=True)
class RollingBudget:
    """What the version being built may still change, per run of versions ending with it."""

    runs: tuple[RunLimit, ...]

    def limit_of_operations(self) -> list[ProtectedLimit]:
        """The budget as ``apply_operations(protected=...)`` takes it."""
        return [ProtectedLimit(run.protected, run.allowed, run.reason()) for run in self.runs]

    def eviction_limit(self, changed: Collection[str]) -> dict[str, Any]:
        """The budget as ``fit_to_budget`` takes it, once the operations changed ``changed``."""
        done = set(changed)
        return {"protected": [(run.protected, max(0, run.allowed - len(done & run.protected))) for run in self.runs]}

    def reason(self) -> str:
        """The tightest run's reason."""
        return min(self.runs, key=lambda run: run.allowed).reason() if self.runs else "rolling change budget: none"


def rolling_budget(parent: Playbook, recent: list[VersionChanges], new_version: int, share: float,
                   window: int) -> RollingBudget:
    """The budget of ``new_version`` built on ``parent``, from the changes ``recent`` versions recorded."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the rolling change cap is a share in [0, 1], got {share}")
    if window < 1:
        raise ValueError(f"the rolling window is at least one version, got {window}")
    runs = []
    for base in range(max(0, new_version - window), new_version):
        earlier = [c for change in recent if base < change.version < new_version for c in change.changed
                   if c.created_version <= base]
        protected = frozenset(e.entry_id for e in parent.entries if e.created_version <= base)
        base_entries = len(protected | {c.entry_id for c in earlier if c.removed})
        if not base_entries:
            continue
        limit = max(1, math.floor(share * base_entries))
        runs.append(RunLimit(base, protected, base_entries, limit,
                             max(0, limit - len({c.entry_id for c in earlier}))))
    return RollingBudget(tuple(runs))


def recent_changes(parent: Playbook, after: Collection[str], changed: Collection[str], recent: list[VersionChanges],
                   new_version: int, window: int) -> list[VersionChanges]:
    """``recent`` with ``new_version``'s changes (``changed``: ids of ``parent``'s entries it rewrote or removed;
    ``after``: the ids the new version holds), keeping the versions a later budget reads."""
    entries: dict[str, PlaybookEntry] = {e.entry_id: e for e in parent.entries}
    now = VersionChanges(version=new_version, changed=[
        ChangedEntry(entry_id=entry_id, created_version=entries[entry_id].created_version,
                     removed=entry_id not in after)
        for entry_id in sorted(set(changed)) if entry_id in entries])
    return [c for c in recent if c.version > new_version - window and c.version < new_version] + [now]


MAX_KEPT_APART = 4096
"""Most pairs kept apart a version carries (the newest decisions first): past it the oldest are asked again."""


def kept_apart(parent: Playbook, after: Collection[str], applied: Sequence[AppliedOperation],
               new_version: int) -> list[KeptApart]:
    """The parent's pairs kept apart and those the applied ADDs of ``new_version`` name (``AddOp.distinct_from``:
    the reducer call kept the lesson apart from an entry it read), while their entry exists (``after``)."""
    pairs = {(p.entry_id, p.content): p for p in parent.curation.kept_apart if p.entry_id in after}
    known = set(parent.entry_ids)
    for item in applied:
        op = item.operation
        if item.outcome == "applied" and isinstance(op, AddOp):
            for entry_id in op.distinct_from:
                if entry_id in known and entry_id in after and (entry_id, op.content) not in pairs:
                    pairs[(entry_id, op.content)] = KeptApart(entry_id=entry_id, content=op.content,
                                                              version=new_version)
    newest = sorted(pairs.values(), key=lambda p: -p.version)[:MAX_KEPT_APART]
    return sorted(newest, key=lambda p: (p.entry_id, p.content))


def said_apart(applied: Sequence[AppliedOperation]) -> list[AppliedOperation]:
    """``applied`` with the reason of each ADD that names ``distinct_from`` saying so (the field is not serialised,
    so the record says it here)."""
    return [item.model_copy(update={"reason": f"{item.reason}; the reducer call kept it apart from "
                                              f"{', '.join(item.operation.distinct_from)}"})
            if isinstance(item.operation, AddOp) and item.operation.distinct_from else item for item in applied]
