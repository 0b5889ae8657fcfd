"""ADD applied: the entry that states the same lesson reinforced (or, matched unconfirmed, challenged or an alias
split off), a contradiction weighed (``supersession``), or a new entry."""

from __future__ import annotations

import combee_core.playbook.aliases as alias_rules
from combee_core.models import AddOp, AppliedOperation, PlaybookEntry
from combee_core.playbook.supersession import conflicting_add, settle
from combee_core.playbook.value import entry_sort_key
from combee_core.playbook.working_playbook import WorkingPlaybook


def _kind(reason: str) -> str:
    return reason if reason in ("near-duplicate", "paraphrase") else "restatement"


def apply_add(work: WorkingPlaybook, op: AddOp) -> AppliedOperation:
    """``op`` against every entry (its text, then its aliases): the closest "same" is reinforced by the ADD's
    support within the count bound, or, unconfirmed, challenged (``supersession.conflicting_add``) or matched through
    an alias (:func:`split`); restating one side of a contradiction settles the pair; a conflict alone challenges
    the entry; else a new entry, the traces behind it kept as its evidence in this version."""
    entries = sorted(work.entries.values(), key=entry_sort_key)
    work.judge.prepare([op.content, *(e.content for e in entries)])
    work.judge.prepare(alias_rules.alias_texts(entries))
    same: tuple[float, PlaybookEntry, str, bool] | None = None
    conflict: tuple[float, PlaybookEntry, str] | None = None
    for entry in entries:  # playbook order: on equal scores the lowest id wins
        verdict = work.judge.judge(op.content, op.section, entry.content, entry.section)
        if verdict.kind == "distinct" and entry.aliases:  # the entry's text first, then its aliases
            verdict = alias_rules.judge_aliases(work.judge, op, entry) or verdict
        if verdict.kind == "same" and (same is None or verdict.score > same[0]):
            same = (verdict.score, entry, verdict.reason, verdict.reinforces)
        elif verdict.kind == "conflict" and (conflict is None or verdict.score > conflict[0]):
            conflict = (verdict.score, entry, verdict.reason)
    if same is not None and not same[3]:  # unconfirmed: no counter rises; a rewording or a reversal the judge
        if same[2].startswith(alias_rules.ALIAS_REASON):  # cannot see, it challenges the entry's text; through
            return split(work, op, same[1], same[2])  # an alias, it may show the alias is a lesson apart
        return conflicting_add(work, op, same[1], same[2], closer_than=same[0])
    if same is not None:
        granted, bound = work.gain(same[1].entry_id, "helpful", op.support)
        target = work.entries[same[1].entry_id] = same[1].model_copy(
            update={"helpful": same[1].helpful + granted, "updated_version": work.new_version}
        )
        applied = AppliedOperation(operation=op, outcome="applied",
                                   reason=f"{_kind(same[2])} of {target.entry_id}{bound}", entry_id=target.entry_id)
        if conflict is not None and work.judge.judge(target.content, target.section, conflict[1].content,
                                                     conflict[1].section).kind == "conflict":
            return settle(work, applied, target, conflict[1], conflict[2])
        return applied
    if conflict is not None:
        return conflicting_add(work, op, conflict[1], conflict[2])
    applied = work.new_entry(op, "added")
    work.created[str(applied.entry_id)] = work.rules.traces(op)
    return applied


def split(work: WorkingPlaybook, op: AddOp, entry: PlaybookEntry, why: str) -> AppliedOperation:
    """``op`` matched ``entry`` through an alias: the alias split off as an entry of its own with ``op`` as its
    alias when ``op`` shows it is a lesson apart (``aliases.split_alias``: no counter rises), else ``op`` folded."""
    if (parted := alias_rules.split_alias(work.judge, op, entry, work.new_version)) is None:
        return work.fold(op, entry, why, "")
    work.entries[entry.entry_id], wordings = parted
    alias, *more = wordings
    work.challenges = [c for c in work.challenges if c.entry_id != entry.entry_id or c.content not in wordings]
    applied = work.new_entry(op.model_copy(update={"content": alias}), "", aliases=[*more, op.content])
    also = f" with {len(more)} more alias(es) it restates" if more else ""
    return applied.model_copy(update={"operation": op, "reason": (
        f"alias {alias!r} of {entry.entry_id} split off as {applied.entry_id}{also}, this ADD its alias: it "
        f"restates the alias, not the lesson of {entry.entry_id}'s wordings ({why})")})
