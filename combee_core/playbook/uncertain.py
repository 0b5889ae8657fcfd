"""The ambiguous band: lessons the judge calls one by their closeness in meaning alone, read by the reducer call when a
real LLM answers it.

A cosine does not separate a rule from its reworded reversal: on the read held-out sets (dev, A-E), all-MiniLM-L6-v2
puts pairs of wordings of one lesson at 0.49-0.87 (5th to 95th percentile) and reworded opposites at 0.51-0.89, and
the conflict check (:mod:`~combee_core.playbook.conflict`) misses most reworded reversals it has no list for. So
every "same" verdict that rests on the cosine is uncertain; only a near-duplicate (word ratio >= 0.9, negations
alike), whose few differing words the conflict check has read, is not. With a real LLM as the reducer:

- **before the call** (the deterministic merge), :meth:`UncertainJudge.contesting` calls an uncertain pair a
  conflict, so ``merge_contested`` sends both ADDs, with their support, to the reducer call; and
  :func:`contest_uncertain_adds` sends an ADD that is uncertain against an entry of the playbook there too (the
  call reads the playbook as its context, so it sees both texts);
- **after it** (applying the call's operations), :meth:`UncertainJudge.trusting` calls an uncertain pair two
  lessons: the call has read both; had it found one lesson, it would have combined the ADDs or TAGged the entry.

Without a real LLM (the simulator, or no reducer call) nothing changes: the judge's verdict stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from combee_core.models import AddOp, Operation, PlaybookEntry
from combee_core.playbook.meaning import Judge, Judgement
from combee_core.playbook.similarity import NEAR_DUPLICATE_THRESHOLD, ComparableText, near_duplicate_score
from combee_core.reduce.deterministic_merge import ContestedMerge

Mode = Literal["contest", "trust"]


@dataclass(frozen=True, slots=True)
class UncertainJudge:
    """A judge whose "same" verdicts that rest on closeness in meaning alone become a conflict (``contest``: the
    reducer call reads both texts) or two lessons (``trust``: the call has read them)."""

    inner: Judge
    mode: Mode

    @classmethod
    def contesting(cls, inner: Judge) -> UncertainJudge:
        return cls(inner, "contest")

    @classmethod
    def trusting(cls, inner: Judge) -> UncertainJudge:
        return cls(inner, "trust")

    def prepare(self, texts: Sequence[str]) -> None:
        self.inner.prepare(texts)

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        verdict = self.inner.judge(new, new_section, old, old_section)
        if verdict.kind != "same" or not uncertain(new, old):
            return verdict
        if self.mode == "contest":
            return Judgement("conflict", verdict.score, f"uncertain ({verdict.reason}): the reducer call reads both")
        return Judgement("distinct", verdict.score, f"uncertain ({verdict.reason}): the reducer call kept both")


def uncertain(a: str, b: str) -> bool:
    """True unless the texts are the same or near-duplicates (then the conflict check has read their difference)."""
    if a == b:
        return False
    score = near_duplicate_score(ComparableText.of(a), ComparableText.of(b), NEAR_DUPLICATE_THRESHOLD)
    return score is None


def contest_uncertain_adds(result: list[Operation] | ContestedMerge, entries: Sequence[PlaybookEntry],
                           judge: Judge) -> list[Operation] | ContestedMerge:
    """``result`` of ``merge_contested``, with every merged ADD that is uncertain against an entry moved to the
    contested operations (one more child of the reducer call, whose context is the playbook)."""
    merged = result.merged if isinstance(result, ContestedMerge) else result
    adds = [op for op in merged if isinstance(op, AddOp)]
    if not adds or not entries:
        return result
    judge.prepare([*(op.content for op in adds), *(e.content for e in entries)])
    moved: list[Operation] = [op for op in adds if any(_uncertain_against(judge, op, entry) for entry in entries)]
    if not moved:
        return result
    kept = [op for op in merged if not any(op is m for m in moved)]
    contested: list[list[Operation]] = [*result.contested, moved] if isinstance(result, ContestedMerge) else [moved]
    return ContestedMerge(merged=kept, contested=contested)


def _uncertain_against(judge: Judge, add: AddOp, entry: PlaybookEntry) -> bool:
    verdict = judge.judge(add.content, add.section, entry.content, entry.section)
    return verdict.kind == "same" and uncertain(add.content, entry.content)
