"""Contradictions settled by evidence and outcomes: pending challenges.

An ADD the judge finds contradicting an entry (a correction) never adds to either side's counters. It joins the
entry's pending :class:`~combee_core.models.Challenge` whose correction it restates (same text, or the judge calls
them one lesson), or opens one; the challenge's support is the distinct traces behind its restatements
(:meth:`ChallengeRules.traces`: the root reducer has already counted an ADD's support in distinct traces and bounded
it by the batch's, ``combee_core.reduce.counts``), summed over versions, kept in the version
(``PlaybookVersion.challenges``), so a restart or a replay rebuilds it. The challenge supersedes the entry once its
evidence (its support) outweighs the entry's: the entry's restatements (:func:`entry_evidence`) plus its outcome
credit (``combee_core.playbook.outcomes``: successes above the baseline among its uses, negative when agents that used
it fail more often). The winner inherits the evidence
it won with (``helpful = support - 1``, its creation counting one). An entry's own wordings (its text, its aliases)
restated word for word never open a challenge against it (:func:`own_wording`), so the old wording, kept as the
winner's alias, does not take the slot back, and one lesson's wordings do not replace one another in turn; a
challenger folded in as an alias still joins its own pending challenge.

An ADD the judge matches to an entry on closeness alone, unconfirmed by the reducer call
(``combee_core.playbook.uncertain``), is a rewording or a reversal the judge cannot see: it is folded (an alias, no
counter) and weighed the same way, restating a challenge only when closer to its wording than to the entry's text
(``restating``'s ``closer_than``); a winner keeps the entry's text and aliases as its aliases.

Where both sides are entries agents used (an ADD that restates one entry and contradicts another, which contradicts
it), outcomes decide over restatements: from :data:`~combee_core.playbook.outcomes.MIN_USES` uses each, the entry
with the clearly higher success rate stays (``outcomes_decide``); otherwise evidence settles the pair only for the
side the ADD restates (``supersession.settle``: a restatement never gets its own side superseded), else both stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from combee_core.models import AddOp, Challenge, OutcomeTally, PlaybookEntry
from combee_core.playbook.meaning import Judge
from combee_core.playbook.outcomes import MIN_USES, credit
from combee_core.playbook.similarity import normalise_text

MAX_WHY_CHARS = 500

MAX_PER_ENTRY = 4
"""Pending challenges kept per entry (distinct corrections of one rule): a fifth replaces the weakest (least support,
then the oldest), and the ADD that opens it says so, so a version's size stays bounded by its entries."""


def entry_evidence(entry: PlaybookEntry) -> int:
    """What an entry's rule rests on by restatement: its creation (1) plus its net counters
    (``helpful - harmful``), at least 1."""
    return max(1, 1 + entry.helpful - entry.harmful)


@dataclass(frozen=True)
class ChallengeRules:
    """What a version's contradictions are weighed with: the batch's distinct traces (None: unbounded, a call
    outside a batch), the playbook's outcome ``baseline`` and the uses each side needs before outcomes decide
    between two entries."""

    batch_traces: int | None = None
    baseline: OutcomeTally = OutcomeTally()
    min_uses: int = MIN_USES

    def traces(self, op: AddOp) -> int:
        """The distinct traces an ADD's support stands for: its support, which the root reducer counts in distinct
        traces (``combee_core.reduce.counts.bound_counts``), never more than the batch's traces, at least 1."""
        traces = op.support
        if self.batch_traces is not None:
            traces = min(traces, self.batch_traces)
        return max(1, traces)

    def strength(self, entry: PlaybookEntry) -> Fraction:
        """An entry's evidence against a contradiction: restatements plus outcome credit (in traces)."""
        return entry_evidence(entry) + credit(entry.outcome, self.baseline).excess

    def describe(self, entry: PlaybookEntry) -> str:
        """``<id> (v<created>-v<updated>, helpful h, harmful x, outcome <credit>: evidence e)``."""
        return (f"{entry.entry_id} (v{entry.created_version}-v{entry.updated_version}, helpful {entry.helpful}, "
                f"harmful {entry.harmful}, outcome {credit(entry.outcome, self.baseline).describe()}: evidence "
                f"{_number(self.strength(entry))})")


def _number(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.2f}"


def restating(challenges: Sequence[Challenge], entry_id: str, op: AddOp, judge: Judge,
              closer_than: float | None = None) -> int | None:
    """Index of the pending challenge of ``entry_id`` whose correction ``op`` restates (the same text, or the
    judge calls them one lesson, with a score above ``closer_than`` when given: a wording as close to the entry as
    to the challenge restates neither; the earliest), or None."""
    mine = [(i, c) for i, c in enumerate(challenges) if c.entry_id == entry_id]
    judge.prepare([c.content for _, c in mine])
    for index, challenge in mine:
        if challenge.content == op.content:
            return index
        verdict = judge.judge(op.content, op.section, challenge.content, challenge.section)
        if verdict.kind == "same" and (closer_than is None or verdict.score > closer_than):
            return index
    return None


def own_wording(entry: PlaybookEntry, text: str) -> str | None:
    """The wording of ``entry`` (its text or one of its aliases) that ``text`` restates word for word (compared
    normalised), or None. Such an ADD is the entry's own lesson restated: it never opens a challenge against the
    entry (it may still join one pending whose correction it restates: a challenger folded in as an alias)."""
    wanted = normalise_text(text)
    return next((wording for wording in (entry.content, *entry.aliases) if normalise_text(wording) == wanted), None)


def accrue(challenges: list[Challenge], entry: PlaybookEntry, op: AddOp, traces: int, version: int,
           why: str, judge: Judge, closer_than: float | None = None) -> tuple[Challenge, Challenge | None]:
    """``op`` (standing for ``traces`` distinct traces) added to ``entry``'s challenge it restates (``restating``),
    or a new one (which replaces the entry's weakest when it has :data:`MAX_PER_ENTRY`); ``challenges`` is updated
    in place. Returns the challenge, and the one it replaced."""
    index = restating(challenges, entry.entry_id, op, judge, closer_than)
    if index is None:
        challenge = Challenge(entry_id=entry.entry_id, entry_content=entry.content, section=op.section,
                              content=op.content, support=traces, first_version=version, last_version=version,
                              why=why[:MAX_WHY_CHARS])
        mine = [c for c in challenges if c.entry_id == entry.entry_id]
        replaced = min(mine, key=lambda c: (c.support, -c.first_version, c.content)) if len(
            mine) >= MAX_PER_ENTRY else None
        if replaced is not None:
            challenges.remove(replaced)
        challenges.append(challenge)
        return challenge, replaced
    challenge = challenges[index].model_copy(update={"support": challenges[index].support + traces,
                                                     "last_version": version})
    challenges[index] = challenge
    return challenge, None


def describe_challenge(challenge: Challenge) -> str:
    """``challenge (support s, v<first>-v<last>: evidence s)``."""
    return (f"challenge (support {challenge.support} distinct traces, v{challenge.first_version}-"
            f"v{challenge.last_version}: evidence {challenge.support})")


def standing(challenges: Iterable[Challenge], entries: Iterable[PlaybookEntry]) -> tuple[Challenge, ...]:
    """The challenges still pending: those whose entry is still there with the text it was challenged in (one
    removed or rewritten ends them), sorted by entry, first version and correction."""
    texts = {entry.entry_id: entry.content for entry in entries}
    kept = [c for c in challenges if texts.get(c.entry_id) == c.entry_content]
    return tuple(sorted(kept, key=lambda c: (c.entry_id, c.first_version, c.content, c.section)))
