"""The operation algebra: ADD, UPDATE, TAG, MERGE and DELETE applied to a playbook in order, every operation's
outcome recorded, then the contradictions left standing settled. Its parts, one job each: ``working_playbook`` (the
call's state and the caps), ``additions`` (ADD), ``supersession`` (contradictions and challenges), ``edits``
(UPDATE, MERGE, DELETE, TAG); deduplication as MERGE operations is ``dedupe``."""

from __future__ import annotations

from collections.abc import Sequence

from combee_core.models import AddOp, AppliedOperation, DeleteOp, MergeOp, Operation, TagOp, UpdateOp
from combee_core.playbook.additions import apply_add
from combee_core.playbook.challenges import ChallengeRules
from combee_core.playbook.consolidation import consolidate
from combee_core.playbook.edits import apply_delete, apply_merge, apply_tag, apply_update
from combee_core.playbook.meaning import Judge, LexicalJudge
from combee_core.playbook.similarity import NEAR_DUPLICATE_THRESHOLD
from combee_core.playbook.supersession import settle_standing
from combee_core.playbook.value import ApplyResult, Playbook, PlaybookError
from combee_core.playbook.working_playbook import ProtectedLimit, WorkingPlaybook

MAX_MERGE_IDS = 32
"""Largest ``MergeOp.entry_ids`` the model accepts; :func:`deduplicate` splits bigger clusters."""


def _apply(work: WorkingPlaybook, op: Operation) -> AppliedOperation:
    if isinstance(op, AddOp):
        return apply_add(work, op)
    if isinstance(op, UpdateOp):
        return apply_update(work, op)
    if isinstance(op, MergeOp):
        return apply_merge(work, op)
    if isinstance(op, DeleteOp):
        return apply_delete(work, op)
    if isinstance(op, TagOp):
        return apply_tag(work, op)
    raise TypeError(f"not an operation: {type(op).__name__}")  # unreachable for valid Operation values


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
    - Then entries whose wordings together (text and aliases) the judge calls one lesson, a side new or changed in
      this version, are merged into the older, no counter raised (``combee_core.playbook.consolidation``: a MERGE in
      ``ApplyResult.consolidated``, counted by ``max_changes``).
    - ``max_changes``: at most this many entries of ``playbook`` may be rewritten or removed (UPDATE of the
      content, DELETE, a MERGE's removed ids and its kept id when the text changes, a superseded rule; each entry
      once); an op over it is rejected with ``change cap: ...``. ADD and TAG change counters, not texts: not counted.
    - ``max_count``: what this call's ADDs and TAGs add to one counter of one entry is at most this (the distinct
      traces behind the version: ``combee_core.reduce.counts``); a cut op says ``count bound: ...``.
    - ``protected``: per limit, at most ``allowed`` of its entries rewritten or removed, counted like
      ``max_changes`` (the rolling change budget); an op over one is rejected with its ``reason``.
    - UPDATE replaces the content (identical content is applied and changes nothing).
    - MERGE keeps the first id (section, ``created_version``) with the new content and all listed entries' summed
      counters, and removes the others. DELETE removes the entry, and its strongest pending correction enters in
      its place with its evidence (``succession``: an ADD in ``ApplyResult.succeeded``). TAG adds ``count`` to
      ``helpful`` or ``harmful``; ``neutral`` changes nothing. An op naming an unknown id (one removed earlier
      too) or a MERGE listing an id twice is rejected with the reason and changes nothing (``entry_id=None``).

    Each op sees the result of the ones before it; every changed entry gets ``updated_version=new_version``. Raises
    :class:`PlaybookError` only when ``new_version`` is below the playbook's version.
    """
    if new_version < playbook.version:
        raise PlaybookError(f"new_version {new_version} is below the playbook's version {playbook.version}")
    judge = LexicalJudge(near_duplicate_threshold, paraphrases) if judge is None else judge
    work = WorkingPlaybook(playbook, new_version, judge, max_changes, rules, max_count, protected)
    applied = [_apply(work, op) for op in operations]
    settle_standing(work)
    consolidate(work)
    return ApplyResult(playbook=work.result(playbook.playbook_id), applied=applied, changed=tuple(work.changed),
                       superseded=work.superseded, consolidated=work.consolidated,
                       succeeded=work.succeeded)
