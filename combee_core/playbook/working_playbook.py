"""The scratch state of one ``apply_operations`` call: the entries as its operations change them, the pending
challenges, and the bookkeeping every operation shares (the per-version change cap and the rolling budget's limits,
the count bound, each side's evidence against a contradiction, and the primitives that create, fold or supersede an
entry)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import NamedTuple

import combee_core.playbook.aliases as alias_rules
from combee_core.models import AddOp, AppliedOperation, Challenge, DeleteOp, PlaybookEntry
from combee_core.playbook.challenges import ChallengeRules, standing
from combee_core.playbook.meaning import Judge
from combee_core.playbook.succession import heir, heir_of
from combee_core.playbook.value import Playbook, entry_sort_key, make_entry_id


class ProtectedLimit(NamedTuple):
    """At most ``allowed`` of ``entry_ids`` may be rewritten or removed (the rolling change budget:
    ``combee_core.reduce.rolling``); ``reason`` says why when one more would be."""

    entry_ids: frozenset[str]
    allowed: int
    reason: str


class WorkingPlaybook:
    """Mutable scratch state for one ``apply_operations`` call (never escapes it): the entries as the operations
    change them, the pending challenges, and what the caps and count bounds have used so far."""

    def __init__(self, playbook: Playbook, new_version: int, judge: Judge, max_changes: int | None = None,
                 rules: ChallengeRules | None = None, max_count: int | None = None,
                 protected: Sequence[ProtectedLimit] = ()) -> None:
        self.playbook = playbook
        self.rules = rules or ChallengeRules(baseline=playbook.baseline)
        self.challenges: list[Challenge] = list(playbook.challenges)
        self.max_count = max_count
        self.protected = protected
        self.gained: dict[tuple[str, str], int] = {}  # (entry id, counter) -> what this call added (<= max_count)
        self.entries: dict[str, PlaybookEntry] = {e.entry_id: e for e in playbook.entries}
        self.original: frozenset[str] = frozenset(self.entries)
        self.max_changes = max_changes
        self.judge = judge
        self.changed: dict[str, None] = {}
        """Entries of the original playbook rewritten or removed so far (UPDATE, MERGE, DELETE, superseded), once."""
        self.superseded: list[AppliedOperation] = []  # DELETEs of superseded rules (``ApplyResult.superseded``)
        self.consolidated: list[AppliedOperation] = []  # MERGEs of one lesson's entries (``ApplyResult.consolidated``)
        self.succeeded: list[AppliedOperation] = []  # ADDs of deleted rules' heirs (``ApplyResult.succeeded``)
        self.created: dict[str, int] = {}
        """Entries this call's ADDs created -> the distinct traces of the ADD that created each: within one batch a
        contradiction is settled by the traces behind each side, not by which came first (:meth:`strength`)."""
        self.removed: dict[str, str] = {}
        self.next_number = playbook.next_entry_number
        self.new_version = new_version

    def missing(self, entry_id: str) -> str | None:
        """Why ``entry_id`` cannot be used, or ``None`` when it exists."""
        if entry_id in self.entries:
            return None
        if entry_id in self.removed:
            return f"entry {entry_id} was removed earlier in this batch ({self.removed[entry_id]})"
        return f"unknown entry id {entry_id}"


    def over_cap(self, changing: Iterable[str]) -> str | None:
        """Why rewriting or removing these entries would break the per-version change cap, or ``None``."""
        new = {entry_id for entry_id in changing if entry_id in self.original and entry_id not in self.changed}
        for limit in self.protected:
            if (guarded := new & limit.entry_ids) and len(guarded) + sum(
                    1 for entry_id in self.changed if entry_id in limit.entry_ids) > limit.allowed:
                return limit.reason
        if self.max_changes is None or len(self.changed) + len(new) <= self.max_changes:
            return None
        return (f"change cap: one version may change at most {self.max_changes} of the previous version's entries "
                f"(UPDATE, MERGE, DELETE and evictions; {len(self.changed)} already changed)")

    def gain(self, entry_id: str, counter: str, declared: int) -> tuple[int, str]:
        """What ``declared`` may add to an entry's counter within ``max_count`` per call, and a note when it is cut
        (``combee_core.reduce.counts``: no count above the distinct traces behind it)."""
        before = self.gained.get((entry_id, counter), 0)
        granted = declared if self.max_count is None else max(0, min(declared, self.max_count - before))
        self.gained[(entry_id, counter)] = before + granted
        if granted == declared:
            return granted, ""
        return granted, (f"; count bound: {counter} of {entry_id} may rise by at most {self.max_count} (the distinct "
                         f"traces behind this version) in one version, {before} already: +{granted} of {declared}")

    def strength(self, entry: PlaybookEntry) -> Fraction:
        """An entry's evidence against a contradiction in this call: ``rules.strength`` (its creation counting one),
        plus, for an entry this call's ADD created, the further distinct traces behind that ADD: a lesson five
        traces of the batch state is not superseded by one two others state because it was applied first."""
        return self.rules.strength(entry) + self.created.get(entry.entry_id, 1) - 1

    def describe(self, entry: PlaybookEntry) -> str:
        """``rules.describe``, with the traces that created the entry in this version when they count."""
        if (traces := self.created.get(entry.entry_id, 1)) == 1:
            return self.rules.describe(entry)
        return (f"{self.rules.describe(entry)[:-1]}, created in this version by {traces} distinct traces: evidence "
                f"{float(self.strength(entry)):g})")

    def mark_changed(self, entry_ids: Iterable[str]) -> None:
        for entry_id in entry_ids:
            if entry_id in self.original:
                self.changed.setdefault(entry_id, None)

    def supersede(self, loser: PlaybookEntry, winner_id: str, reason: str) -> None:
        self.mark_changed([loser.entry_id])
        del self.entries[loser.entry_id]
        self.removed[loser.entry_id] = f"superseded by {winner_id}"
        self.superseded.append(AppliedOperation(operation=DeleteOp(entry_id=loser.entry_id), outcome="applied",
                                                entry_id=loser.entry_id, reason=reason))

    def succeed(self, removed: PlaybookEntry, how: str) -> str:
        """``removed`` (just removed as wrong) succeeded by its strongest pending correction
        (``combee_core.playbook.succession``), which enters with its evidence (restatements later in this call add
        nothing on top); a note naming the heir, or ``""``."""
        challenge = heir(self.challenges, removed, self.entries.values(), self.judge)
        if challenge is None:
            return ""
        self.challenges.remove(challenge)
        entry, record = heir_of(challenge, removed, self.next_number, self.new_version, how)
        self.next_number += 1
        self.entries[entry.entry_id] = entry
        self.gained[(entry.entry_id, "helpful")] = challenge.support - 1
        self.succeeded.append(record)
        return f"; its strongest pending correction enters as {entry.entry_id}"

    def fold(self, op: AddOp, entry: PlaybookEntry, why: str, note: str) -> AppliedOperation:
        """``op`` folded into ``entry`` unconfirmed: no counter rises; its wording kept as an alias (not chained)."""
        if not why.startswith(alias_rules.ALIAS_REASON):
            entry, alias_note = alias_rules.with_alias(entry, op.content, self.new_version)
            self.entries[entry.entry_id], note = entry, alias_note + note
        return AppliedOperation(operation=op, outcome="applied", entry_id=entry.entry_id, reason=(
            f"folded into {entry.entry_id}, no counter raised: {why}{note}"))


    def new_entry(self, op: AddOp, reason: str, helpful: int = 0, aliases: Sequence[str] = ()) -> AppliedOperation:
        entry_id = make_entry_id(op.section, self.next_number)
        self.next_number += 1
        self.entries[entry_id] = PlaybookEntry(
            entry_id=entry_id,
            section=op.section,
            content=op.content,
            helpful=helpful,
            aliases=list(aliases),
            created_version=self.new_version,
            updated_version=self.new_version,
        )
        return AppliedOperation(operation=op, outcome="applied", reason=reason, entry_id=entry_id)


    def result(self, playbook_id: str) -> Playbook:
        return Playbook(
            playbook_id=playbook_id,
            version=self.new_version,
            entries=tuple(sorted(self.entries.values(), key=entry_sort_key)),
            next_entry_number=self.next_number,
            baseline=self.playbook.baseline,
            challenges=standing(self.challenges, self.entries.values()),
        )
