"""A rule and the rule the judge says contradicts it, standing side by side: outcomes settle which one holds.

An ADD that contradicts an entry is settled where it is applied (``operations``: a pending challenge, or outcomes and
evidence when it restates the entry's rival). A contradiction can still come to stand between two *entries*: a
challenge's winner enters with a new wording that no one compared with the other entries, a reducer call's answer
(a merge, an UPDATE, an ADD it wrote) brings in a text the judge would have read as a flip, or both sides were
created in one version from as many traces. Agents served both follow either (the task's success falls to a coin
toss), so :func:`standing_contradictions` finds every such pair as it forms (one side new or reworded in this
version), and where outcome data can decide, it does (:func:`settled_pairs`: both sides used by at least
``min_uses`` traces and their success rates apart by more than ``outcomes.DECISIVE_Z`` sd,
``outcomes.outcomes_decide``): the side agents fail with more often is superseded. Restated evidence does not settle
a standing pair here: an entry that stood beside its opposite has outcome credit measured while agents were served
both (each side's credit dragged down alike), so a new wording with its creation's one trace would outweigh the
established side (measured: the honest benchmark's union stand-in, seed 2, lost the right rule so), and a
conflict-check false positive between two lessons would remove one at once instead of through a challenge's
accumulated traces. Otherwise both stay, as a tie between an ADD's two sides does, until an ADD restating one side
settles them (:func:`settle`, evidence as well) or their outcomes come apart. Whatever a reducer call said: its
keep-apart decision turns an unconfirmed "same" into two lessons, never a contradiction into two lessons. Pure: the
same entries, judge and rules give the same pairs and the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import NamedTuple

from combee_core.models import PlaybookEntry
from combee_core.playbook.meaning import Judge
from combee_core.playbook.outcomes import outcomes_decide
from combee_core.playbook.value import entry_sort_key


class Contradiction(NamedTuple):
    """Two active entries the judge says contradict each other (``first`` before ``second`` in playbook order)."""

    first: PlaybookEntry
    second: PlaybookEntry
    why: str


class Settled(NamedTuple):
    """Which side of a contradiction holds, and by what (``"outcomes"`` or ``"evidence"``)."""

    winner: PlaybookEntry
    loser: PlaybookEntry
    by: str
    why: str = ""


def standing_contradictions(entries: Sequence[PlaybookEntry], judge: Judge,
                            fresh: Callable[[PlaybookEntry], bool] = lambda entry: True) -> list[Contradiction]:
    """Every pair of ``entries`` with a ``fresh`` side (new or reworded in this version) that the judge calls a
    conflict (either way round), in playbook order."""
    ordered = sorted(entries, key=entry_sort_key)
    judge.prepare([entry.content for entry in ordered])
    found: list[Contradiction] = []
    for n, first in enumerate(ordered):
        for second in ordered[n + 1:]:
            if not (fresh(first) or fresh(second)):
                continue
            verdict = judge.judge(second.content, second.section, first.content, first.section)
            if verdict.kind != "conflict":
                verdict = judge.judge(first.content, first.section, second.content, second.section)
            if verdict.kind == "conflict":
                found.append(Contradiction(first, second, verdict.reason))
    return found


def settle(pair: Contradiction, strength: Callable[[PlaybookEntry], Fraction], min_uses: int,
           by_evidence: bool = True) -> Settled | None:
    """The side that holds: the one agents succeed with clearly more often when both were used at least
    ``min_uses`` times, else (``by_evidence``) the one with more ``strength``; None when neither outweighs."""
    winner, by = outcomes_decide(pair.first, pair.second, min_uses), "outcomes"
    if winner is None and by_evidence:
        first, second = strength(pair.first), strength(pair.second)
        winner, by = (pair.first if first > second else pair.second if second > first else None), "evidence"
    if winner is None:
        return None
    return Settled(winner, pair.second if winner is pair.first else pair.first, by, pair.why)


def settled_pairs(entries: Mapping[str, PlaybookEntry], judge: Judge, strength: Callable[[PlaybookEntry], Fraction],
                  min_uses: int, allowed: Callable[[str], bool], before: Mapping[str, str]) -> Iterator[Settled]:
    """The decisions of :func:`settle` over the standing contradictions of ``entries`` (entry id -> entry, read as
    it changes: the caller removes each loser before the next pair is read) with a side whose text is not what
    ``before`` (entry id -> text, the version the operations started from) held; a pair is skipped once a side is
    gone; a loser the caller's caps keep (``allowed`` False) stays."""
    def fresh(entry: PlaybookEntry) -> bool:
        return before.get(entry.entry_id) != entry.content

    for pair in standing_contradictions(list(entries.values()), judge, fresh):
        if pair.first.entry_id not in entries or pair.second.entry_id not in entries:
            continue  # one side already lost to another pair
        current = pair._replace(first=entries[pair.first.entry_id], second=entries[pair.second.entry_id])
        settled = settle(current, strength, min_uses, by_evidence=False)
        if settled is not None and allowed(settled.loser.entry_id):
            yield settled
