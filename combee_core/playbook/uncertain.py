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
  call reads the playbook as its context, so it sees both texts), and so does an ADD the judge matches to one of an
  entry's aliases;
- **after it** (applying the call's operations), :meth:`UncertainJudge.trusting` leaves the judge's verdict, unless
  the call *explicitly* kept the lesson apart from the entry (``AddOp.distinct_from``) or an earlier call did (the
  pairs a version keeps, ``CurationState.kept_apart``): silence is no decision. A model that echoes an ADD it was
  shown has not said the lessons differ, so a cosine-only "same" still consolidates: the ADD is folded into the entry
  (no new entry), but raises none of its counters, since closeness alone also matches a reworded reversal; only the
  call's own TAG or merge reinforces. Its wording is kept as an alias of the entry, which later ADDs are matched
  against too, again without raising a counter (:mod:`~combee_core.playbook.aliases`); and, since it may be a
  reversal the judge cannot see, it joins the entry's pending challenge (:mod:`~combee_core.playbook.challenges`),
  taking the entry's slot once more distinct traces restate it than the entry's evidence. An explicit keep-both makes
  the pair two lessons (a new entry, the old one's counters unchanged) and is kept in the version, so the pair is
  not sent to a call again.

Without a real LLM (the simulator, or no reducer call) nothing changes: the judge's verdict stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from combee_core.models import AddOp, Operation, PlaybookEntry
from combee_core.playbook.aliases import alias_texts, judge_aliases
from combee_core.playbook.meaning import GroupJudge, Judge, Judgement, LessonsJudge
from combee_core.playbook.similarity import NEAR_DUPLICATE_THRESHOLD, ComparableText, near_duplicate_score
from combee_core.reduce.deterministic_merge import ContestedMerge

Mode = Literal["contest", "trust"]


@dataclass(frozen=True, slots=True)
class UncertainJudge:
    """A judge whose "same" verdicts that rest on closeness in meaning alone become a conflict (``contest``: the
    reducer call reads both texts) or two lessons (``trust``: the call has read them)."""

    inner: Judge
    mode: Mode
    kept: frozenset[tuple[str, str]] = frozenset()
    """(lesson, entry text) pairs a reducer call explicitly kept apart."""

    @classmethod
    def contesting(cls, inner: Judge) -> UncertainJudge:
        return cls(inner, "contest")

    @classmethod
    def trusting(cls, inner: Judge, kept: frozenset[tuple[str, str]] = frozenset()) -> UncertainJudge:
        return cls(inner, "trust", kept)

    def prepare(self, texts: Sequence[str]) -> None:
        self.inner.prepare(texts)

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        verdict = self.inner.judge(new, new_section, old, old_section)
        if verdict.kind != "same" or not uncertain(new, old):
            return verdict
        if self.mode == "contest":
            return Judgement("conflict", verdict.score, f"uncertain ({verdict.reason}): the reducer call reads both")
        if (new, old) in self.kept or (old, new) in self.kept:
            return Judgement("distinct", verdict.score, f"uncertain ({verdict.reason}): a reducer call kept both",
                             apart=True)
        return Judgement("same", verdict.score, f"uncertain ({verdict.reason}): the reducer call said nothing of the "
                         "pair, so it is one lesson by the judge, unconfirmed", reinforces=False)  # silence

    def judge_group(self, new: str, new_section: str, texts: Sequence[str]) -> Judgement:
        """The inner judge's verdict on ``new`` against the wordings of one lesson together (never certain: a
        "same" is contested, or kept apart when a call kept ``new`` apart from any of the texts, else unconfirmed);
        "distinct" when the inner judge cannot compare against several wordings."""
        if not isinstance(self.inner, GroupJudge):
            return Judgement("distinct", 0.0, "the judge compares pairs only")
        verdict = self.inner.judge_group(new, new_section, texts)
        if verdict.kind != "same":
            return verdict
        if self.mode == "contest":
            return Judgement("conflict", verdict.score, f"uncertain ({verdict.reason}): the reducer call reads both")
        if any((new, text) in self.kept or (text, new) in self.kept for text in texts):
            return Judgement("distinct", verdict.score, f"uncertain ({verdict.reason}): a reducer call kept both",
                             apart=True)
        return Judgement("same", verdict.score, f"uncertain ({verdict.reason}): unconfirmed", reinforces=False)

    def judge_lessons(self, texts: Sequence[str], others: Sequence[str]) -> Judgement:
        """The inner judge's verdict on two entries' wordings (never certain: a "same" is contested, or kept apart
        when a call kept any wording of one apart from any of the other, else unconfirmed); "distinct" when the inner
        judge cannot compare them."""
        if not isinstance(self.inner, LessonsJudge):
            return Judgement("distinct", 0.0, "the judge compares lessons by their wordings only")
        verdict = self.inner.judge_lessons(texts, others)
        if verdict.kind != "same":
            return verdict
        if self.mode == "contest":
            return Judgement("conflict", verdict.score, f"uncertain ({verdict.reason}): the reducer call reads both")
        if any((a, b) in self.kept or (b, a) in self.kept for a in texts for b in others):
            return Judgement("distinct", verdict.score, f"uncertain ({verdict.reason}): a reducer call kept both",
                             apart=True)
        return Judgement("same", verdict.score, f"uncertain ({verdict.reason}): unconfirmed", reinforces=False)


def uncertain(a: str, b: str) -> bool:
    """True unless the texts are the same or near-duplicates (then the conflict check has read their difference)."""
    if a == b:
        return False
    score = near_duplicate_score(ComparableText.of(a), ComparableText.of(b), NEAR_DUPLICATE_THRESHOLD)
    return score is None


def contest_uncertain_adds(result: list[Operation] | ContestedMerge, entries: Sequence[PlaybookEntry],
                           judge: Judge, kept: frozenset[tuple[str, str]] = frozenset()
                           ) -> list[Operation] | ContestedMerge:
    """``result`` of ``merge_contested``, with every merged ADD that is uncertain against an entry moved to the
    contested operations (one more child of the reducer call, whose context is the playbook); a pair in ``kept``
    (a call kept them apart before) is not asked again."""
    merged = result.merged if isinstance(result, ContestedMerge) else result
    adds = [op for op in merged if isinstance(op, AddOp)]
    if not adds or not entries:
        return result
    judge.prepare([*(op.content for op in adds), *(e.content for e in entries), *alias_texts(entries)])
    moved: list[Operation] = [op for op in adds if any(
        (op.content, entry.content) not in kept and _uncertain_against(judge, op, entry) for entry in entries)]
    if not moved:
        return result
    rest = [op for op in merged if not any(op is m for m in moved)]
    contested: list[list[Operation]] = [*result.contested, moved] if isinstance(result, ContestedMerge) else [moved]
    return ContestedMerge(merged=rest, contested=contested)


def _uncertain_against(judge: Judge, add: AddOp, entry: PlaybookEntry) -> bool:
    """True when the judge calls ``add`` the entry's lesson on closeness alone, or one of its aliases' lesson (a
    match through an alias is never certain: ``combee_core.playbook.aliases``)."""
    verdict = judge.judge(add.content, add.section, entry.content, entry.section)
    if verdict.kind == "distinct" and entry.aliases:
        return judge_aliases(judge, add, entry) is not None
    return verdict.kind == "same" and uncertain(add.content, entry.content)


def kept_pairs(entries: Sequence[PlaybookEntry], kept: Sequence[tuple[str, str]],
               operations: Sequence[Operation] = ()) -> frozenset[tuple[str, str]]:
    """(lesson, entry text) pairs kept apart: ``kept`` (entry id, lesson) pairs of the version, and the ADDs among
    ``operations`` that name entries in ``distinct_from``; pairs whose entry ``entries`` no longer holds are gone. A
    lesson kept apart from an entry is kept apart from its aliases too (``combee_core.playbook.aliases``)."""
    texts = {entry.entry_id: (entry.content, *entry.aliases) for entry in entries}
    named = [(entry_id, op.content) for op in operations if isinstance(op, AddOp) for entry_id in op.distinct_from]
    return frozenset((lesson, text) for entry_id, lesson in [*kept, *named] if entry_id in texts
                     for text in texts[entry_id])
