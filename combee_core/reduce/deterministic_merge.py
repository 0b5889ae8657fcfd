"""The deterministic merge of a batch's partials: what the root reducer merges without an LLM call (the same lesson
from several children, summed TAGs, identical edits), and what it leaves to the call (contested lessons, edits that
disagree). No Kafka, no model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.models import AddOp, DeleteOp, MergeOp, Operation, TagOp, TagValue, UpdateOp
from combee_core.playbook import normalise_text, text_similarity
from combee_core.playbook.meaning import Judge


@dataclass(frozen=True)
class ContestedMerge:
    """A group merged without a call except for its contested operations, which one reducer call judges: the
    ADDs that restate or contradict one another across children and the edits that disagree on an entry."""

    merged: list[Operation]
    contested: list[list[Operation]]
    """Per child that has any, its contested operations (a call reads these children, not the whole group)."""


PARAPHRASE_SIMILARITY = 0.6
"""Two ADDs of different children in one section at least this similar (but not the same text) may say one
lesson in two wordings, or contradict each other: a reducer call judges them. Below it, or in different sections,
they are distinct lessons (the playbook, too, compares entries within a section only, and itself merges
near-duplicates from 0.9 on: ``combee_core.playbook.NEAR_DUPLICATE_THRESHOLD``)."""


def merge_without_conflict(children: Sequence[list[Operation]],
                           paraphrase_similarity: float = PARAPHRASE_SIMILARITY,
                           judge: Judge | None = None) -> list[Operation] | None:
    """The children's operations merged without an LLM call, or None when they conflict.

    Merged: ADDs of the same normalised text and section become one ADD (support summed; the lexicographically
    smallest wording kept), TAGs are summed per (entry, tag), identical edits are kept once. Conflicts (None):
    ADDs of different children in one section whose texts are similar (``>= paraphrase_similarity``) but not
    the same, or the same text in different sections; two different UPDATE/MERGE/DELETE operations touching one
    entry.

    With ``judge`` (:class:`~combee_core.playbook.meaning.SemanticJudge`), ADDs are grouped by meaning instead,
    across sections: an ADD that states the lesson of an earlier group (visited in (section, content) order) joins
    it (support summed, the group's first wording and section kept); an ADD that contradicts one is a conflict
    (None), so the reducer call sees both texts with their support. The result is sorted (ADD by section and
    content, then UPDATE, MERGE, DELETE by JSON, then TAG by entry and tag), so it does not depend on the order
    of the children.
    """
    result = merge_contested(children, paraphrase_similarity, judge)
    return None if isinstance(result, ContestedMerge) else result


def merge_contested(children: Sequence[list[Operation]], paraphrase_similarity: float = PARAPHRASE_SIMILARITY,
                    judge: Judge | None = None) -> list[Operation] | ContestedMerge:
    """:func:`merge_without_conflict`, but a conflict sends only what is contested to the reducer call.

    Contested: every ADD of a group (the ADDs merged into one lesson) that conflicts with another group, with that
    other group's ADDs (so the call sees each wording with its child's support); and, when two different edits
    touch one entry, every edit. The rest (the other lessons, all TAGs) is merged as without a conflict, so one
    contradiction in a batch no longer makes one call read every child (at a small context capacity, a call that
    reads every partial loses lessons no one contested). Without a conflict, the same list as
    :func:`merge_without_conflict`."""
    if judge is not None:
        merged_adds, contested = _adds_by_meaning(children, judge)
    else:
        merged_adds, contested = _adds_lexically(children, paraphrase_similarity)
    merged, edits_contested = _merge_rest(children, merged_adds)
    if not contested and not edits_contested:
        return merged
    if edits_contested:
        merged = [op for op in merged if isinstance(op, (AddOp, TagOp))]
        contested |= {(c, i) for c, ops in enumerate(children) for i, op in enumerate(ops)
                      if isinstance(op, (UpdateOp, MergeOp, DeleteOp))}
    per_child = [[op for i, op in enumerate(ops) if (c, i) in contested] for c, ops in enumerate(children)]
    return ContestedMerge(merged=merged, contested=[ops for ops in per_child if ops])


Position = tuple[int, int]
"""(child, index of the operation in that child's list)."""


def _adds_lexically(children: Sequence[list[Operation]],
                    paraphrase_similarity: float) -> tuple[list[AddOp], set[Position]]:
    adds: dict[str, tuple[AddOp, int]] = {}  # normalised text -> (representative ADD, child)
    support: dict[str, int] = {}
    members: dict[str, list[Position]] = {}
    contested: set[str] = set()
    for child, operations in enumerate(children):
        for index, op in enumerate(operations):
            if not isinstance(op, AddOp):
                continue
            key = normalise_text(op.content)
            seen = adds.get(key)
            if seen is not None:
                if seen[0].section != op.section:
                    contested.add(key)
                if op.content < seen[0].content:
                    adds[key] = (op, seen[1])
                support[key] += op.support
                members[key].append((child, index))
                continue
            for other_key, (other, other_child) in adds.items():
                if (other_child != child and other.section == op.section
                        and text_similarity(op.content, other.content) >= paraphrase_similarity):
                    contested |= {key, other_key}
            adds[key] = (op, child)
            support[key] = op.support
            members[key] = [(child, index)]
    merged = [add.model_copy(update={"support": support[key]}) for key, (add, _) in adds.items()
              if key not in contested]
    return merged, {position for key in contested for position in members[key]}


def _adds_by_meaning(children: Sequence[list[Operation]], judge: Judge) -> tuple[list[AddOp], set[Position]]:
    adds = sorted(((op, (child, index)) for child, ops in enumerate(children) for index, op in enumerate(ops)
                   if isinstance(op, AddOp)), key=lambda item: (item[0].section, item[0].content, item[0].support))
    judge.prepare([add.content for add, _ in adds])
    heads: list[AddOp] = []
    support: list[int] = []
    members: list[list[Position]] = []
    contested: set[int] = set()
    for add, position in adds:
        joined: int | None = None
        conflicts: list[int] = []
        for index, head in enumerate(heads):
            kind = "same" if head.content == add.content else judge.judge(
                add.content, add.section, head.content, head.section).kind
            if kind == "conflict":
                conflicts.append(index)
            elif kind == "same":
                joined = index
                break
        if joined is None:
            heads.append(add)
            support.append(0)
            members.append([])
            joined = len(heads) - 1
        support[joined] += add.support
        members[joined].append(position)
        if conflicts:
            contested |= {joined, *conflicts}
    merged = [head.model_copy(update={"support": support[n]}) for n, head in enumerate(heads) if n not in contested]
    return merged, {position for n in contested for position in members[n]}


def _merge_rest(children: Sequence[list[Operation]], merged_adds: list[AddOp]) -> tuple[list[Operation], bool]:
    """The merged ADDs, then the children's edits and summed TAGs; and whether two different edits touch one
    entry (then the edits are the reducer call's to judge)."""
    tags: dict[tuple[str, TagValue], int] = {}
    edits: dict[str, Operation] = {}
    touched: dict[str, str] = {}  # entry id -> JSON of the one edit that touches it
    disagree = False
    for operations in children:
        for op in operations:
            if isinstance(op, AddOp):
                continue
            if isinstance(op, TagOp):
                tags[(op.entry_id, op.tag)] = tags.get((op.entry_id, op.tag), 0) + op.count
                continue
            text = op.model_dump_json()
            ids = op.entry_ids if isinstance(op, MergeOp) else [op.entry_id]
            for entry_id in ids:
                if touched.setdefault(entry_id, text) != text:
                    disagree = True
            edits[text] = op
    merged: list[Operation] = [*sorted(merged_adds, key=lambda a: (a.section, a.content))]
    for kind in (UpdateOp, MergeOp, DeleteOp):
        merged += [edits[text] for text in sorted(edits) if isinstance(edits[text], kind)]
    merged += [TagOp(entry_id=entry, tag=tag, count=count) for (entry, tag), count in sorted(tags.items())]
    return merged, disagree
