"""Contradictions settled: an ADD that contradicts an entry (or matches it unconfirmed) joins or opens its pending
challenge, which supersedes the entry once it outweighs it (``challenges``); an ADD restating one side of a
contradiction settles the pair (by evidence only in that side's favour); a contradiction left standing between two
entries is settled by outcomes (``opposites``). Every superseded entry is a DELETE with both sides' evidence, within
the caps."""

from __future__ import annotations

from combee_core.models import MAX_ALIASES, AddOp, AppliedOperation, PlaybookEntry
from combee_core.playbook.challenges import accrue, describe_challenge, own_wording, restating
from combee_core.playbook.opposites import settled_pairs
from combee_core.playbook.outcomes import outcomes_decide
from combee_core.playbook.working_playbook import WorkingPlaybook


def conflicting_add(work: WorkingPlaybook, op: AddOp, old: PlaybookEntry, why: str,
                    closer_than: float | None = None) -> AppliedOperation:
    """An ADD that contradicts ``old``, or with ``closer_than`` matches it unconfirmed (a rewording or a reversal
    the judge cannot see, at that score): no counter changes; it joins ``old``'s challenge it restates (closer
    than ``closer_than``) or opens one, which supersedes ``old`` (a DELETE with both sides' evidence, then the
    ADD) once it outweighs ``old``'s evidence (``combee_core.playbook.challenges``); else the ADD is rejected
    (folded when unconfirmed) and the challenge pends. An unconfirmed winner keeps ``old``'s wordings as aliases."""
    if (own := own_wording(old, op.content)) is not None and restating(
            work.challenges, old.entry_id, op, work.judge, closer_than) is None:  # never a challenge to itself
        return work.fold(op, old, why, f"; it restates {old.entry_id}'s own wording {own!r}, which never "
                         "challenges the entry")
    traces, bound = work.gain(old.entry_id, "challenge support", work.rules.traces(op))
    folded = closer_than is not None
    if traces == 0:  # the corrections of this version already stand for every trace behind it
        return work.fold(op, old, why, bound) if folded else AppliedOperation(operation=op, outcome="rejected",
            reason=f"conflicts with {work.describe(old)} ({why}): kept, no counter changed{bound}")
    challenge, replaced = accrue(work.challenges, old, op, traces, work.new_version, why, work.judge, closer_than)
    lineage = f"{work.describe(old)} vs this ADD's {describe_challenge(challenge)}"
    if challenge.support <= work.strength(old):
        dropped = "" if replaced is None else (
            f"; it replaced the weakest of {old.entry_id}'s pending corrections ({replaced.content!r}, support "
            f"{replaced.support})")
        if folded:  # the wording with more evidence holds the slot
            return work.fold(op, old, why, f"; {lineage}: not outweighed, pending{dropped}{bound}")
        return AppliedOperation(operation=op, outcome="rejected", reason=(
            f"conflicts with {lineage} ({why}); the old rule's evidence is not outweighed: kept, no counter "
            f"changed, the challenge pending{dropped}{bound}"))
    if (cap := work.over_cap([old.entry_id])) is not None:
        if folded:
            return work.fold(op, old, why, f"; {lineage}: would supersede it, but {cap}; pending")
        return AppliedOperation(operation=op, outcome="rejected", reason=(
            f"conflicts with {lineage} ({why}) and would supersede it, but {cap}; the challenge pending"))
    aliases = [a for a in (old.content, *old.aliases) if a != op.content][:MAX_ALIASES] if folded else ()
    applied = work.new_entry(op, "", helpful=challenge.support - 1, aliases=aliases)  # inherits its evidence
    # ... which this version's traces stand behind: their restatements of the winner add nothing on top
    work.gained[(str(applied.entry_id), "helpful")] = challenge.support - 1
    work.challenges.remove(challenge)
    work.supersede(old, str(applied.entry_id), f"superseded by {applied.entry_id}: {why}; {lineage}")
    return applied.model_copy(update={"reason": f"added; supersedes {lineage} ({why})"})


def settle(work: WorkingPlaybook, applied: AppliedOperation, restated: PlaybookEntry, other: PlaybookEntry,
           why: str) -> AppliedOperation:
    """An ADD restated ``restated``, which contradicts ``other``: outcomes decide between them when both were
    used enough (either way), else the better evidence, only in ``restated``'s favour (:func:`against_restated`);
    the loser is superseded (a DELETE recorded after the operations)."""
    winner, by = outcomes_decide(restated, other, work.rules.min_uses), "outcomes"
    if winner is None:
        mine, theirs = work.strength(restated), work.strength(other)
        winner, by = (restated if mine > theirs else other if theirs > mine else None), "evidence"
    record = f"{work.describe(restated)} contradicts {work.describe(other)} ({why})"
    if winner is None:
        return applied.model_copy(update={"reason": f"{applied.reason}; {record}: neither outweighs, both kept"})
    if by == "evidence" and winner is other:
        return applied.model_copy(update={"reason": f"{applied.reason}; {record}: {against_restated(other)}"})
    loser = other if winner is restated else restated
    if (cap := work.over_cap([loser.entry_id])) is not None:
        return applied.model_copy(update={"reason": f"{applied.reason}; {record}: {by} favour "
                                          f"{winner.entry_id}, but {cap}"})
    work.supersede(loser, winner.entry_id, f"superseded by {winner.entry_id} ({by} decide): {record}")
    return applied.model_copy(update={"reason": f"{applied.reason}; {record}: {by} decide for "
                                      f"{winner.entry_id}, {loser.entry_id} superseded"})


def against_restated(other: PlaybookEntry) -> str:
    """Why an ADD's restatement never settles a pair against the side it restates: it is evidence *for* that side;
    the evidence favouring ``other`` (old restatements) leaves both (outcomes, independent of the ADD, decide either
    way)."""
    return (f"the evidence favours {other.entry_id}, but a restatement is evidence for the side it restates, never "
            "against it: both kept")


def settle_standing(work: WorkingPlaybook) -> None:
    """The contradictions left standing after the operations, settled (``opposites``) within the caps."""
    for won in settled_pairs(work.entries, work.judge, work.strength, work.rules.min_uses, lambda loser: (
            work.over_cap([loser]) is None), {entry.entry_id: entry.content for entry in work.playbook.entries}):
        work.supersede(won.loser, won.winner.entry_id, (
            f"superseded by {won.winner.entry_id} ({won.by} decide): a standing contradiction, "
            f"{work.describe(won.winner)} vs {work.describe(won.loser)} ({won.why})"))
