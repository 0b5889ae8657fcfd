"""Demotion by outcomes: an entry whose agents do measurably worse than the playbook's baseline is removed.

Each version, after the batch's outcomes are counted (``combee_core.playbook.outcomes.with_outcomes``), every entry
of the previous version that agents used at least ``min_uses`` (decayed) times and whose posterior success rate is
below the baseline's by more than ``z`` standard deviations of the difference
(:func:`combee_core.playbook.outcomes.worse_than_baseline`; default :data:`~combee_core.playbook.outcomes.DEMOTION_Z`
= 3) is removed, recorded as a DELETE with its evidence, the furthest below first. It is a change like any other:
it counts against the per-version change cap, the rolling change budget and the majority rule, in that order with
the model's operations (which go first) and before the budget's evictions. An entry the caps keep is *flagged*: the
version stays as it is and the caller warns (a dead letter), and the entry is tested again next version.

What it rests on: outcomes come from the traces (``TraceOutcome``), never from a model's answer, and a trace counts
once. What it cannot tell apart: an entry used on harder tasks than the playbook's average looks worse than the
baseline although it may help those tasks (the baseline is all the playbook's traces, not the same tasks without the
entry); ``docs/architecture.md`` says so.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from combee_core.models import AppliedOperation, DeleteOp
from combee_core.playbook import Playbook
from combee_core.playbook.outcomes import MIN_USES, credit, worse_than_baseline


@dataclass(frozen=True)
class Demoted:
    """A playbook after demotion: the result, the removals (applied DELETEs with their evidence) and the entries
    measurably worse than the baseline that the caps kept (flagged)."""

    playbook: Playbook
    removals: list[AppliedOperation]
    flagged: list[str]


def demote_by_outcomes(playbook: Playbook, *, z: Fraction, existing: Collection[str], allowance: int | None,
                       protected: Sequence[tuple[frozenset[str], int]] = (), min_uses: int = MIN_USES) -> Demoted:
    """``playbook`` without its ``existing`` entries (those of the previous version) whose agents did measurably
    worse than its baseline, the furthest below first; at most ``allowance`` of them (None: no limit), and an entry
    of a ``protected`` set only while that set's allowance lasts (the rolling change budget). The rest are
    ``flagged``."""
    found = [(worse_than_baseline(entry.outcome, playbook.baseline, min_uses, z), entry)
             for entry in playbook.entries if entry.entry_id in existing]
    ranked = sorted(((gap, entry) for gap, entry in found if gap is not None),
                    key=lambda pair: (-pair[0], pair[1].entry_id))
    left = [allowed for _, allowed in protected]
    removed: set[str] = set()
    removals: list[AppliedOperation] = []
    flagged: list[str] = []
    for gap, entry in ranked:
        guarded = [n for n, (ids, _) in enumerate(protected) if entry.entry_id in ids]
        if (allowance is not None and len(removed) >= allowance) or any(left[n] <= 0 for n in guarded):
            flagged.append(entry.entry_id)
            continue
        for n in guarded:
            left[n] -= 1
        removed.add(entry.entry_id)
        removals.append(AppliedOperation(
            operation=DeleteOp(entry_id=entry.entry_id), outcome="applied", entry_id=entry.entry_id,
            reason=(f"demoted by outcomes: agents that used it did measurably worse than the playbook's baseline "
                    f"({credit(entry.outcome, playbook.baseline).describe()}; {float(gap) ** 0.5:.1f} sd below, "
                    f"more than {float(z):g} sd from {min_uses} uses)")))
    if not removed:
        return Demoted(playbook, [], flagged)
    kept = tuple(entry for entry in playbook.entries if entry.entry_id not in removed)
    return Demoted(replace(playbook, entries=kept), removals, flagged)
