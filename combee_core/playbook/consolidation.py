"""Entries consolidated: two entries whose wordings together the judge calls one lesson become one, no counter raised.

With a reducer model that says nothing, one lesson's wordings can end up in several entries, each holding some of
them as aliases: each ADD was compared with the entries as they stood, and a wording that would match an entry now
(through an alias or the prototype it gained later) made an entry of its own then. After a version's operations,
:func:`consolidate` compares every pair of entries with a side new or changed in this version (playbook order) by
the judge's own verdicts: each wording (text and aliases) of one entry is the other's lesson as an ADD of it would be
matched now (close enough to one of the other's wordings or to their prototype, at the judge's threshold:
``judge_lessons``), every pair of wordings passes the checks a close pair gets (one conflict, or one reason that sets
a pair apart: another scope, other things named, one frame about another subject, a reducer call's keep-both, keeps
them apart) and, under a scope both state, each says to do what the other entry's text says
(``aliases.actions_differ``, as for an ADD matched through an alias). No new threshold. When it says one lesson:

- the older entry (created first) survives with its text; the other's text and aliases become its aliases (the
  alias bound holds: past it, wordings are dropped and the record says so);
- **no counter rises**: the survivor takes the counters, evidence of use and outcome tally of the side with more
  evidence (``WorkingPlaybook.strength``, ties to the survivor) as they are, never their sum. The merge rests on
  closeness in meaning no one confirmed (as a fold does), so it must not add up two sides' restatements into more
  evidence than either had (against a pending challenge, say); taking the stronger side whole lowers no lesson's
  evidence, and one side's outcome tally is one set of traces, never a trace counted twice;
- the removed entry's pending challenges are re-pointed to the survivor (a correction of one wording of a lesson
  corrects the lesson): one restating a challenge of the survivor word for word joins it (their support summed: the
  ADDs behind them are distinct), and the survivor keeps its ``challenges.MAX_PER_ENTRY`` strongest;
- it is a change (the removed entry, when the version started with it), within the change cap and the rolling
  budget: a capped pair stays two entries, tried again when a side changes;
- it is recorded as an applied MERGE (survivor first, its own text) whose reason says why, after the operations.

A judge that cannot compare lessons (the lexical judge) consolidates nothing. Pure and in playbook order, so a replay
makes the same merges.
"""

from __future__ import annotations

from typing import Protocol

from combee_core.models import MAX_ALIASES, AddOp, AppliedOperation, Challenge, MergeOp, PlaybookEntry
from combee_core.playbook.aliases import actions_differ
from combee_core.playbook.challenges import MAX_PER_ENTRY
from combee_core.playbook.meaning import Judge, Judgement, LessonsJudge
from combee_core.playbook.value import entry_id_number, entry_sort_key
from combee_core.playbook.working_playbook import WorkingPlaybook


class _Judge(Judge, LessonsJudge, Protocol):
    """What consolidation consults: a judge of pairs that also judges lessons."""


_EVIDENCE = ("helpful", "harmful", "used_helpful", "used_harmful", "outcome")


def consolidate(work: WorkingPlaybook) -> None:
    """Merge, in playbook order, each pair of ``work``'s entries (one side new or changed in this version) that the
    judge calls one lesson by their wordings together; the MERGEs are kept in ``work.consolidated``."""
    judge = work.judge
    if not isinstance(judge, LessonsJudge):
        return
    ordered = sorted(work.entries.values(), key=entry_sort_key)
    judge.prepare([text for entry in ordered for text in _wordings(entry)])
    for n, listed in enumerate(ordered):
        for later in ordered[n + 1:]:
            first = work.entries.get(listed.entry_id)
            if first is None:
                break
            second = work.entries.get(later.entry_id)
            if second is None or not (_fresh(work, first) or _fresh(work, second)):
                continue
            verdict = _one_lesson(judge, first, second)
            if verdict.kind == "distinct" and not verdict.apart:  # the other way round: the first's wordings
                verdict = _one_lesson(judge, second, first)  # each the second's lesson
            if verdict.kind != "same":
                continue
            keep, gone = sorted((first, second), key=_age)
            if work.over_cap([gone.entry_id]) is None:
                _merge(work, keep, gone, verdict.reason)


def _one_lesson(judge: _Judge, entry: PlaybookEntry, other: PlaybookEntry) -> Judgement:
    """Whether each wording of ``other`` is ``entry``'s lesson (``judge_lessons``) and, like an ADD matched to an
    entry, says to do what the entry's text says under a scope both state (``aliases.actions_differ``)."""
    verdict = judge.judge_lessons(_wordings(entry), _wordings(other))
    if verdict.kind != "same":
        return verdict
    for wording in _wordings(other):
        if (why := actions_differ(judge, AddOp(section=other.section, content=wording), entry)) is not None:
            return Judgement("distinct", verdict.score, why, apart=True)
    return verdict


def _wordings(entry: PlaybookEntry) -> list[str]:
    return [entry.content, *entry.aliases]


def _fresh(work: WorkingPlaybook, entry: PlaybookEntry) -> bool:
    return entry.updated_version == work.new_version


def _age(entry: PlaybookEntry) -> tuple[int, int, str]:
    number = entry_id_number(entry.entry_id)
    return entry.created_version, -1 if number is None else number, entry.entry_id


def _merge(work: WorkingPlaybook, keep: PlaybookEntry, gone: PlaybookEntry, why: str) -> None:
    wordings = list(dict.fromkeys(w for w in (*keep.aliases, *_wordings(gone)) if w != keep.content))
    note = "" if len(wordings) <= MAX_ALIASES else (
        f"; alias bound: {len(wordings) - MAX_ALIASES} wording(s) not kept (at most {MAX_ALIASES})")
    stronger = gone if work.strength(gone) > work.strength(keep) else keep
    evidence = f"{work.describe(keep)} and {work.describe(gone)}: the evidence of {stronger.entry_id} kept, not summed"
    if stronger is gone and gone.entry_id in work.created:
        work.created[keep.entry_id] = work.created[gone.entry_id]
    work.mark_changed([gone.entry_id])
    work.entries[keep.entry_id] = keep.model_copy(update={
        **{name: getattr(stronger, name) for name in _EVIDENCE},
        "aliases": wordings[:MAX_ALIASES], "updated_version": work.new_version})
    del work.entries[gone.entry_id]
    work.removed[gone.entry_id] = f"consolidated into {keep.entry_id}"
    work.challenges = _repointed(work.challenges, keep, gone)
    work.consolidated.append(AppliedOperation(
        operation=MergeOp(entry_ids=[keep.entry_id, gone.entry_id], content=keep.content), outcome="applied",
        entry_id=keep.entry_id, reason=(f"consolidated {gone.entry_id} into {keep.entry_id}, no counter raised: "
                                        f"their wordings are one lesson ({why}); {evidence}{note}")))


def _repointed(challenges: list[Challenge], keep: PlaybookEntry, gone: PlaybookEntry) -> list[Challenge]:
    """``challenges`` with ``gone``'s moved to ``keep`` (joining one of the same correction, supports summed), and
    ``keep`` left with its :data:`MAX_PER_ENTRY` strongest (support, then the newest)."""
    mine: dict[str, Challenge] = {}
    for challenge in challenges:
        if challenge.entry_id not in (keep.entry_id, gone.entry_id):
            continue
        moved = challenge.model_copy(update={"entry_id": keep.entry_id, "entry_content": keep.content})
        if (held := mine.get(moved.content)) is None:
            mine[moved.content] = moved
            continue
        mine[moved.content] = held.model_copy(update={
            "support": held.support + moved.support, "first_version": min(held.first_version, moved.first_version),
            "last_version": max(held.last_version, moved.last_version)})
    kept = sorted(mine.values(), key=lambda c: (-c.support, -c.first_version, c.content))[:MAX_PER_ENTRY]
    return [c for c in challenges if c.entry_id not in (keep.entry_id, gone.entry_id)] + kept
