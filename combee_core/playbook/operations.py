"""The operation algebra: ADD, UPDATE, TAG, MERGE and DELETE applied to a playbook (near-duplicate ADDs folded into
the entry they repeat, every operation's outcome recorded), and deduplication as MERGE operations."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import NamedTuple

import combee_core.playbook.aliases as alias_rules
from combee_core.models import (
    MAX_ALIASES,
    AddOp,
    AppliedOperation,
    Challenge,
    DeleteOp,
    MergeOp,
    Operation,
    PlaybookEntry,
    TagOp,
    UpdateOp,
)
from combee_core.playbook.challenges import ChallengeRules, accrue, describe_challenge, own_wording, restating, standing
from combee_core.playbook.meaning import Judge, LexicalJudge
from combee_core.playbook.opposites import settled_pairs
from combee_core.playbook.outcomes import outcomes_decide
from combee_core.playbook.similarity import NEAR_DUPLICATE_THRESHOLD
from combee_core.playbook.value import ApplyResult, Playbook, PlaybookError, entry_sort_key, make_entry_id, merged_entry

MAX_MERGE_IDS = 32
"""Largest ``MergeOp.entry_ids`` the model accepts; :func:`deduplicate` splits bigger clusters."""


class ProtectedLimit(NamedTuple):
    """At most ``allowed`` of ``entry_ids`` may be rewritten or removed (the rolling change budget:
    ``combee_core.reduce.rolling``); ``reason`` says why when one more would be."""

    entry_ids: frozenset[str]
    allowed: int
    reason: str


def _kind(reason: str) -> str:
    return reason if reason in ("near-duplicate", "paraphrase") else "restatement"


class _WorkingPlaybook:
    """Mutable scratch state for one :func:`apply_operations` call (never escapes it)."""

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

    def apply(self, op: Operation) -> AppliedOperation:
        if isinstance(op, AddOp):
            return self._add(op)
        if isinstance(op, UpdateOp):
            return self._update(op)
        if isinstance(op, MergeOp):
            return self._merge(op)
        if isinstance(op, DeleteOp):
            return self._delete(op)
        if isinstance(op, TagOp):
            return self._tag(op)
        raise TypeError(f"not an operation: {type(op).__name__}")  # unreachable for valid Operation values

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

    def _add(self, op: AddOp) -> AppliedOperation:
        entries = sorted(self.entries.values(), key=entry_sort_key)
        self.judge.prepare([op.content, *(e.content for e in entries)])
        self.judge.prepare(alias_rules.alias_texts(entries))
        same: tuple[float, PlaybookEntry, str, bool] | None = None
        conflict: tuple[float, PlaybookEntry, str] | None = None
        for entry in entries:  # playbook order: on equal scores the lowest id wins
            verdict = self.judge.judge(op.content, op.section, entry.content, entry.section)
            if verdict.kind == "distinct" and entry.aliases:  # the entry's text first, then its aliases
                verdict = alias_rules.judge_aliases(self.judge, op, entry) or verdict
            if verdict.kind == "same" and (same is None or verdict.score > same[0]):
                same = (verdict.score, entry, verdict.reason, verdict.reinforces)
            elif verdict.kind == "conflict" and (conflict is None or verdict.score > conflict[0]):
                conflict = (verdict.score, entry, verdict.reason)
        if same is not None and not same[3]:  # unconfirmed: no counter rises; a rewording or a reversal the judge
            if same[2].startswith(alias_rules.ALIAS_REASON):  # cannot see, it challenges the entry's text; through
                return self._split(op, same[1], same[2])  # an alias, it may show the alias is a lesson apart
            return self._conflicting_add(op, same[1], same[2], closer_than=same[0])
        if same is not None:
            granted, bound = self.gain(same[1].entry_id, "helpful", op.support)
            target = self.entries[same[1].entry_id] = same[1].model_copy(
                update={"helpful": same[1].helpful + granted, "updated_version": self.new_version}
            )
            applied = AppliedOperation(operation=op, outcome="applied",
                                       reason=f"{_kind(same[2])} of {target.entry_id}{bound}", entry_id=target.entry_id)
            if conflict is not None and self.judge.judge(target.content, target.section, conflict[1].content,
                                                         conflict[1].section).kind == "conflict":
                return self._settle(applied, target, conflict[1], conflict[2])
            return applied
        if conflict is not None:
            return self._conflicting_add(op, conflict[1], conflict[2])
        applied = self._new_entry(op, "added")
        self.created[str(applied.entry_id)] = self.rules.traces(op)
        return applied

    def settle_standing(self) -> None:  # contradictions left standing, settled (``opposites``) within the caps
        for won in settled_pairs(self.entries, self.judge, self.strength, self.rules.min_uses, lambda loser: (
                self.over_cap([loser]) is None), {entry.entry_id: entry.content for entry in self.playbook.entries}):
            self._supersede(won.loser, won.winner.entry_id, (
                f"superseded by {won.winner.entry_id} ({won.by} decide): a standing contradiction, "
                f"{self.describe(won.winner)} vs {self.describe(won.loser)} ({won.why})"))

    def _supersede(self, loser: PlaybookEntry, winner_id: str, reason: str) -> None:
        self.mark_changed([loser.entry_id])
        del self.entries[loser.entry_id]
        self.removed[loser.entry_id] = f"superseded by {winner_id}"
        self.superseded.append(AppliedOperation(operation=DeleteOp(entry_id=loser.entry_id), outcome="applied",
                                                entry_id=loser.entry_id, reason=reason))

    def _settle(self, applied: AppliedOperation, restated: PlaybookEntry, other: PlaybookEntry,
                why: str) -> AppliedOperation:
        """An ADD restated ``restated``, which contradicts ``other``: outcomes decide between them when both were
        used enough, else the better evidence; the other is superseded (a DELETE recorded after the operations)."""
        winner, by = outcomes_decide(restated, other, self.rules.min_uses), "outcomes"
        if winner is None:
            mine, theirs = self.strength(restated), self.strength(other)
            winner, by = (restated if mine > theirs else other if theirs > mine else None), "evidence"
        record = f"{self.describe(restated)} contradicts {self.describe(other)} ({why})"
        if winner is None:
            return applied.model_copy(update={"reason": f"{applied.reason}; {record}: neither outweighs, both kept"})
        loser = other if winner is restated else restated
        if (cap := self.over_cap([loser.entry_id])) is not None:
            return applied.model_copy(update={"reason": f"{applied.reason}; {record}: {by} favour "
                                              f"{winner.entry_id}, but {cap}"})
        self._supersede(loser, winner.entry_id, f"superseded by {winner.entry_id} ({by} decide): {record}")
        return applied.model_copy(update={"reason": f"{applied.reason}; {record}: {by} decide for "
                                          f"{winner.entry_id}, {loser.entry_id} superseded"})

    def _fold(self, op: AddOp, entry: PlaybookEntry, why: str, note: str) -> AppliedOperation:
        """``op`` folded into ``entry`` unconfirmed: no counter rises; its wording kept as an alias (not chained)."""
        if not why.startswith(alias_rules.ALIAS_REASON):
            entry, alias_note = alias_rules.with_alias(entry, op.content, self.new_version)
            self.entries[entry.entry_id], note = entry, alias_note + note
        return AppliedOperation(operation=op, outcome="applied", entry_id=entry.entry_id, reason=(
            f"folded into {entry.entry_id}, no counter raised: {why}{note}"))

    def _split(self, op: AddOp, entry: PlaybookEntry, why: str) -> AppliedOperation:
        """``op`` matched ``entry`` through an alias: the alias split off as an entry of its own with ``op`` as its
        alias when ``op`` shows it is a lesson apart (``aliases.split_alias``: no counter rises), else ``op`` folded."""
        if (split := alias_rules.split_alias(self.judge, op, entry, self.new_version)) is None:
            return self._fold(op, entry, why, "")
        self.entries[entry.entry_id], alias = split
        self.challenges = [c for c in self.challenges if (c.entry_id, c.content) != (entry.entry_id, alias)]
        applied = self._new_entry(op.model_copy(update={"content": alias}), "", aliases=[op.content])
        return applied.model_copy(update={"operation": op, "reason": (
            f"alias {alias!r} of {entry.entry_id} split off as {applied.entry_id}, this ADD its alias: it restates "
            f"the alias, not the lesson of {entry.entry_id}'s wordings ({why})")})

    def _new_entry(self, op: AddOp, reason: str, helpful: int = 0, aliases: Sequence[str] = ()) -> AppliedOperation:
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

    def _conflicting_add(self, op: AddOp, old: PlaybookEntry, why: str,
                         closer_than: float | None = None) -> AppliedOperation:
        """An ADD that contradicts ``old``, or with ``closer_than`` matches it unconfirmed (a rewording or a reversal
        the judge cannot see, at that score): no counter changes; it joins ``old``'s challenge it restates (closer
        than ``closer_than``) or opens one, which supersedes ``old`` (a DELETE with both sides' evidence, then the
        ADD) once it outweighs ``old``'s evidence (``combee_core.playbook.challenges``); else the ADD is rejected
        (folded when unconfirmed) and the challenge pends. An unconfirmed winner keeps ``old``'s wordings as aliases."""
        if (own := own_wording(old, op.content)) is not None and restating(
                self.challenges, old.entry_id, op, self.judge, closer_than) is None:  # never a challenge to itself
            return self._fold(op, old, why, f"; it restates {old.entry_id}'s own wording {own!r}, which never "
                              "challenges the entry")
        traces, bound = self.gain(old.entry_id, "challenge support", self.rules.traces(op))
        folded = closer_than is not None
        if traces == 0:  # the corrections of this version already stand for every trace behind it
            return self._fold(op, old, why, bound) if folded else AppliedOperation(operation=op, outcome="rejected",
                reason=f"conflicts with {self.describe(old)} ({why}): kept, no counter changed{bound}")
        challenge, replaced = accrue(self.challenges, old, op, traces, self.new_version, why, self.judge, closer_than)
        lineage = f"{self.describe(old)} vs this ADD's {describe_challenge(challenge)}"
        if challenge.support <= self.strength(old):
            dropped = "" if replaced is None else (
                f"; it replaced the weakest of {old.entry_id}'s pending corrections ({replaced.content!r}, support "
                f"{replaced.support})")
            if folded:  # the wording with more evidence holds the slot
                return self._fold(op, old, why, f"; {lineage}: not outweighed, pending{dropped}{bound}")
            return AppliedOperation(operation=op, outcome="rejected", reason=(
                f"conflicts with {lineage} ({why}); the old rule's evidence is not outweighed: kept, no counter "
                f"changed, the challenge pending{dropped}{bound}"))
        if (cap := self.over_cap([old.entry_id])) is not None:
            if folded:
                return self._fold(op, old, why, f"; {lineage}: would supersede it, but {cap}; pending")
            return AppliedOperation(operation=op, outcome="rejected", reason=(
                f"conflicts with {lineage} ({why}) and would supersede it, but {cap}; the challenge pending"))
        aliases = [a for a in (old.content, *old.aliases) if a != op.content][:MAX_ALIASES] if folded else ()
        applied = self._new_entry(op, "", helpful=challenge.support - 1, aliases=aliases)  # inherits its evidence
        # ... which this version's traces stand behind: their restatements of the winner add nothing on top
        self.gained[(str(applied.entry_id), "helpful")] = challenge.support - 1
        self.challenges.remove(challenge)
        self._supersede(old, str(applied.entry_id), f"superseded by {applied.entry_id}: {why}; {lineage}")
        return applied.model_copy(update={"reason": f"added; supersedes {lineage} ({why})"})

    def _update(self, op: UpdateOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        entry = self.entries[op.entry_id]
        if entry.content == op.content:
            return AppliedOperation(
                operation=op, outcome="applied", reason="content unchanged", entry_id=op.entry_id
            )
        if (why := self.over_cap([op.entry_id])) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        self.mark_changed([op.entry_id])
        self.entries[op.entry_id] = entry.model_copy(
            update={"content": op.content, "updated_version": self.new_version}
        )
        return AppliedOperation(operation=op, outcome="applied", reason="updated", entry_id=op.entry_id)

    def _merge(self, op: MergeOp) -> AppliedOperation:
        listed: dict[str, None] = {}
        for entry_id in op.entry_ids:
            if entry_id in listed:
                return AppliedOperation(operation=op, outcome="rejected",
                                        reason=f"entry {entry_id} is listed more than once")
            listed[entry_id] = None
            if (why := self.missing(entry_id)) is not None:
                return AppliedOperation(operation=op, outcome="rejected", reason=why)
        merged = [self.entries[entry_id] for entry_id in op.entry_ids]
        keep, others = merged[0], merged[1:]
        aliases, alias_note = alias_rules.merged_aliases(op.content, merged)
        changing = [e.entry_id for e in others] + ([keep.entry_id] if keep.content != op.content else [])
        if (why := self.over_cap(changing)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        self.mark_changed(changing)
        self.entries[keep.entry_id] = merged_entry(keep, merged, op.content, self.new_version, aliases)
        for other in others:
            del self.entries[other.entry_id]
            self.removed[other.entry_id] = f"merged into {keep.entry_id}"
        return AppliedOperation(operation=op, outcome="applied", entry_id=keep.entry_id, reason=(
            f"merged {', '.join(e.entry_id for e in others)} into {keep.entry_id}{alias_note}"))

    def _delete(self, op: DeleteOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        if (why := self.over_cap([op.entry_id])) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        self.mark_changed([op.entry_id])
        del self.entries[op.entry_id]
        self.removed[op.entry_id] = "deleted"
        return AppliedOperation(operation=op, outcome="applied", reason="deleted", entry_id=op.entry_id)

    def _tag(self, op: TagOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        if op.tag == "neutral":
            return AppliedOperation(operation=op, outcome="applied", reason="neutral tag: no change",
                                    entry_id=op.entry_id)
        entry = self.entries[op.entry_id]
        granted, bound = self.gain(op.entry_id, op.tag, op.count)
        self.entries[op.entry_id] = entry.model_copy(update={op.tag: getattr(entry, op.tag) + granted,
                                                             "updated_version": self.new_version})
        return AppliedOperation(
            operation=op, outcome="applied", reason=f"{op.tag} +{granted}{bound}", entry_id=op.entry_id
        )

    def result(self, playbook_id: str) -> Playbook:
        return Playbook(
            playbook_id=playbook_id,
            version=self.new_version,
            entries=tuple(sorted(self.entries.values(), key=entry_sort_key)),
            next_entry_number=self.next_number,
            baseline=self.playbook.baseline,
            challenges=standing(self.challenges, self.entries.values()),
        )


def apply_operations(
    playbook: Playbook,
    operations: Sequence[Operation],
    new_version: int,
    *,
    near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    max_changes: int | None = None,
    paraphrases: bool = True,
    judge: Judge | None = None,
    rules: ChallengeRules | None = None,
    max_count: int | None = None,
    protected: Sequence[ProtectedLimit] = (),
) -> ApplyResult:
    """Apply ``operations`` in order to ``playbook``, giving version ``new_version``; never raises for an op.

    - ADD creates ``<prefix>-<counter>`` with ``helpful=harmful=0``, unless ``judge`` finds an entry that states
      the same lesson (the closest one, ties to the lowest id): then that entry is reinforced, ``helpful +=
      op.support``, with reason ``near-duplicate of <id>`` / ``paraphrase of <id>`` (the default
      :class:`LexicalJudge`: same section, :func:`is_near_duplicate`, with ``paraphrases`` :func:`is_paraphrase`)
      or ``restatement of <id>`` (:class:`SemanticJudge`: by meaning, any section).
    - An ADD that contradicts an entry (the judge says ``conflict``: a flipped order, unit, quantity, polarity,
      ...) changes neither counter: it joins the entry's pending challenge (``challenges``, weighed by ``rules``),
      which supersedes the entry once its support (distinct traces, over versions) outweighs the entry's evidence
      (restatements plus outcome credit): the ADD's reason (``added; supersedes <id> ...``) and a DELETE of the old
      entry in ``ApplyResult.superseded`` (counted by ``max_changes``) carry both sides' evidence; the new entry
      starts with the evidence it won with; else the ADD is rejected, the challenge pending. An ADD restating one
      entry and contradicting its rival settles the pair (outcomes when both were used enough, else evidence). An
      ADD matched to an entry's text on closeness alone, unconfirmed, is folded (an alias) and challenges it alike.
    - After the operations, a contradiction left standing between two entries is settled alike
      (``combee_core.playbook.opposites``): the loser superseded (a DELETE in ``ApplyResult.superseded``).
    - ``max_changes``: at most this many entries of ``playbook`` may be rewritten or removed (UPDATE of the
      content, DELETE, a MERGE's removed ids and its kept id when the text changes, a superseded rule; each entry
      once); an op over it is rejected with ``change cap: ...``. ADD and TAG change counters, not texts: not counted.
    - ``max_count``: what this call's ADDs and TAGs add to one counter of one entry is at most this (the distinct
      traces behind the version: ``combee_core.reduce.counts``); a cut op says ``count bound: ...``.
    - ``protected``: per limit, at most ``allowed`` of its entries rewritten or removed, counted like
      ``max_changes`` (the rolling change budget); an op over one is rejected with its ``reason``.
    - UPDATE replaces the content (identical content is applied and changes nothing).
    - MERGE keeps the first id (section, ``created_version``) with the new content and all listed entries' summed
      counters, and removes the others. DELETE removes the entry. TAG adds ``count`` to ``helpful`` or
      ``harmful``; ``neutral`` changes nothing. An op naming an unknown id (one removed earlier too) or a MERGE
      listing an id twice is rejected with the reason and changes nothing (``entry_id=None``).

    Each op sees the result of the ones before it; every changed entry gets ``updated_version=new_version``. Raises
    :class:`PlaybookError` only when ``new_version`` is below the playbook's version.
    """
    if new_version < playbook.version:
        raise PlaybookError(f"new_version {new_version} is below the playbook's version {playbook.version}")
    judge = LexicalJudge(near_duplicate_threshold, paraphrases) if judge is None else judge
    work = _WorkingPlaybook(playbook, new_version, judge, max_changes, rules, max_count, protected)
    applied = [work.apply(op) for op in operations]
    work.settle_standing()
    return ApplyResult(playbook=work.result(playbook.playbook_id), applied=applied, changed=tuple(work.changed),
                       superseded=work.superseded)
