"""What a reducer call's answer may change: only what the operations it was given back.

A reducer call reads its children's operations (the contested ADDs with their support, TAGs) and answers operations.
A model can leave a lesson out (say nothing of it), fold lessons together that the judge keeps apart, or declare more
support or TAG counts than it was given. None of that is evidence: the lessons were written from traces, and a call's
silence or say-so adds no trace. So :func:`answer_within_evidence` holds an answer to what it was given:

- an ADD it was given that no ADD of the answer restates (the same text, or the judge calls them one lesson) is
  applied as it was given: leaving a lesson out decides nothing, and the judge curates it as without the call;
- an answer ADD's support is at most the support of the ADDs given that it restates (each given ADD backs one answer
  ADD: one with the same text first, else the one the judge finds closest); an answer ADD that restates none of them
  has no trace behind it and is not applied;
- a TAG's count is at most what the given TAGs of that entry and tag summed, plus, for a TAG helpful, the support of
  the given ADDs it answers (a call that merges a lesson into an entry says so with a TAG: the judge must call the
  lesson the entry's); a given TAG left out is applied as given.

What the answer may still decide: which wording a lesson keeps, merges of lessons the judge calls one, an explicit
keep-apart (``AddOp.distinct_from``), and its edits (UPDATE, MERGE, DELETE), which the change cap and the rolling
budget bound. Every cut is returned as a rejected operation with its reason, to be kept in the version.
"""

from __future__ import annotations

from collections.abc import Sequence

from combee_core.models import AddOp, AppliedOperation, Operation, PlaybookEntry, TagOp, TagValue
from combee_core.playbook.meaning import Judge
from combee_core.playbook.similarity import normalise_text

ANSWER_BOUND = "reducer answer"
"""How the reason of a recorded cut starts."""


def answer_within_evidence(children: Sequence[Sequence[Operation]], answer: Sequence[Operation],
                           judge: Judge | None, entries: Sequence[PlaybookEntry] = ()
                           ) -> tuple[list[Operation], list[AppliedOperation]]:
    """``answer`` held to what ``children`` back (module doc), and the records of what was cut. ``judge`` None:
    only the same text restates (the lexical curation's judge has no section-free closeness); ``entries``: the
    playbook the call read (what its TAGs name)."""
    given = [op for ops in children for op in ops if isinstance(op, AddOp)]
    adds = [op for op in answer if isinstance(op, AddOp)]
    claimed: dict[str, int] = {}  # entry id -> the helpful count the answer's TAGs claim
    for op in answer:
        if isinstance(op, TagOp) and op.tag == "helpful":
            claimed[op.entry_id] = claimed.get(op.entry_id, 0) + op.count
    if judge is not None:
        judge.prepare([*(op.content for op in given), *(op.content for op in adds),
                       *(entry.content for entry in entries if entry.entry_id in claimed)])
    tags_given: dict[tuple[str, TagValue], int] = {}
    for tag in (op for ops in children for op in ops if isinstance(op, TagOp)):
        tags_given[(tag.entry_id, tag.tag)] = tags_given.get((tag.entry_id, tag.tag), 0) + tag.count
    tags_left = dict(tags_given)
    # a lesson merged into an entry is answered by a TAG helpful claiming more than the TAGs given
    tagged = {entry.entry_id: entry for entry in entries
              if claimed.get(entry.entry_id, 0) > tags_given.get((entry.entry_id, "helpful"), 0)}
    backing = [0] * len(adds)
    unanswered: list[AddOp] = []
    for lesson in given:
        index = _restating(lesson, adds, judge)
        if index is not None:
            backing[index] += lesson.support
        elif (entry_id := _merged_into(lesson, tagged, judge)) is not None:
            tags_left[(entry_id, "helpful")] = tags_left.get((entry_id, "helpful"), 0) + lesson.support
            if tags_left[(entry_id, "helpful")] >= claimed[entry_id]:  # the claim is backed: no more lessons for it
                del tagged[entry_id]
        else:
            unanswered.append(lesson)
    kept: list[Operation] = []
    records: list[AppliedOperation] = []
    nth_add = 0
    for op in answer:
        if isinstance(op, AddOp):
            backed, nth_add = backing[nth_add], nth_add + 1
            if backed == 0:
                records.append(AppliedOperation(operation=op, outcome="rejected", reason=(
                    f"{ANSWER_BOUND}: this ADD restates none of the {len(given)} lesson(s) the call was given, so no "
                    "trace stands behind it: not applied")))
                continue
            if op.support > backed:
                records.append(AppliedOperation(operation=op, outcome="rejected", reason=(
                    f"{ANSWER_BOUND}: ADD support {op.support} is more than the {backed} of the lessons given that "
                    f"it restates; counted as {backed}, the rest rejected")))
                op = op.model_copy(update={"support": backed})
            kept.append(op)
        elif isinstance(op, TagOp) and op.tag != "neutral":
            left = tags_left.get((op.entry_id, op.tag), 0)
            granted = min(op.count, left)
            if granted < op.count:
                records.append(AppliedOperation(operation=op, outcome="rejected", reason=(
                    f"{ANSWER_BOUND}: TAG {op.tag} count {op.count} of {op.entry_id} is more than the "
                    f"{left} the call was given; counted as {granted}")))
            if granted:
                tags_left[(op.entry_id, op.tag)] = left - granted
                kept.append(op if granted == op.count else op.model_copy(update={"count": granted}))
        else:
            kept.append(op)
    kept += unanswered
    answered_tags = {(op.entry_id, op.tag) for op in answer if isinstance(op, TagOp)}
    kept += [TagOp(entry_id=entry_id, tag=tag, count=count) for (entry_id, tag), count in sorted(tags_given.items())
             if (entry_id, tag) not in answered_tags]
    return kept, records


def _merged_into(op: AddOp, tagged: dict[str, PlaybookEntry], judge: Judge | None) -> str | None:
    """The id of the entry a TAG helpful of the answer names whose lesson the judge calls ``op``'s (the first in
    id order), or None."""
    for entry_id in sorted(tagged):
        entry = tagged[entry_id]
        if normalise_text(entry.content) == normalise_text(op.content) or (judge is not None and judge.judge(
                op.content, op.section, entry.content, entry.section).kind == "same"):
            return entry_id
    return None


def _restating(op: AddOp, adds: Sequence[AddOp], judge: Judge | None) -> int | None:
    """Index of the answer ADD that restates ``op``: the first with the same text, else the one the judge calls one
    lesson with it at the highest score (ties: the first), else None."""
    text = normalise_text(op.content)
    for index, add in enumerate(adds):
        if normalise_text(add.content) == text:
            return index
    if judge is None:
        return None
    best: tuple[float, int] | None = None
    for index, add in enumerate(adds):
        verdict = judge.judge(op.content, op.section, add.content, add.section)
        if verdict.kind == "same" and (best is None or verdict.score > best[0]):
            best = (verdict.score, index)
    return None if best is None else best[1]
