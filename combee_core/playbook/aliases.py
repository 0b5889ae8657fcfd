"""Aliases: wordings folded into an entry on closeness in meaning alone, kept with it and matched by later ADDs.

When the reducer call is a real model and says nothing of a pair the judge calls one lesson by closeness alone
(``combee_core.playbook.uncertain``), the ADD is folded into the entry and raises none of its counters. Its wording
is kept as an alias of the entry (``PlaybookEntry.aliases``, in the version, so a replay reproduces it): a later ADD
that the judge finds distinct from the entry's text but the same as one of its aliases is folded into the entry too,
and raises no counter either (its match rests on a match no one confirmed). An ADD the judge finds *contradicting*
an alias is not folded through the aliases (it is judged against the entry's text alone), nor is one the judge sets
apart from the entry's text for a stated reason (``Judgement.apart``: another scope, another subject): an alias rests
on a match no one confirmed and cannot overrule what the entry's own text says. Nor is one that, like the entry's
text, states a scope and says to do something else there (:func:`actions_differ`: the judge on the two actions
alone): an alias may carry the entry's lesson to other wordings of its scope, not another action into the entry.
When no single wording
is close enough, a judge that can (:class:`~combee_core.playbook.meaning.GroupJudge`) compares the ADD with the
entry's text and its aliases together (their mean direction, at its own threshold): a "same" there folds it alike.
Aliases do not chain: a wording matched only through an alias (or the aliases together) is folded but not stored as
another alias, so the matches cannot drift away from the entry's text one step at a time.

An alias keeps its own identity until evidence merges it: a fold rests on one match no one confirmed, and may have
put a wording of another lesson into the entry (a lesson with no entry of its own is then lost: every later wording
of it is folded through the alias). A later ADD that the judge finds distinct from the entry's text but the same as
one alias is that evidence when neither it nor the alias is the lesson of the entry's *other* wordings together
(their prototype: the entry's text and its other aliases, the alias left out, since a prototype holding the alias
leans towards it): :func:`split_alias` takes the alias out of the entry and makes it an entry of its own, the ADD
its alias (no counter rises on either side). When the ADD or the alias is close to that prototype, the judge
comparing lessons still decides: the ADD with every alias it restates against the entry's other wordings, and when
it calls them two lessons both ways (as consolidation would leave them apart), those aliases are split off together.
The judge's own verdicts decide, no new threshold; a wording that is also the lesson of the entry's other wordings
stays folded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from combee_core.models import MAX_ALIASES, AddOp, PlaybookEntry
from combee_core.playbook.embedding import EmbeddingError
from combee_core.playbook.meaning import GroupJudge, Judge, Judgement, LessonsJudge, compares_groups, compares_lessons
from combee_core.playbook.scope import split_scope

logger = logging.getLogger(__name__)

ALIAS_REASON = "alias"
"""How a verdict reached through an alias begins its reason."""

__all__ = ["ALIAS_REASON", "MAX_ALIASES", "actions_differ", "alias_texts", "judge_aliases", "with_alias",
           "merged_aliases", "split_alias"]


def judge_aliases(judge: Judge, op: AddOp, entry: PlaybookEntry) -> Judgement | None:
    """A non-reinforcing "same" when ``op`` states the lesson of one of ``entry``'s aliases (the closest, ties to the
    first stored), None when it matches none or contradicts any of them, or when the judge sets ``op`` apart from the
    entry's own text (``Judgement.apart``: another scope, another subject; an alias rests on a match no one
    confirmed and cannot overrule what the entry's text says)."""
    if judge.judge(op.content, op.section, entry.content, entry.section).apart:
        return None
    if (why := actions_differ(judge, op, entry)) is not None:
        logger.debug("%r not matched through the aliases of %s: %s", op.content, entry.entry_id, why)
        return None
    best: tuple[float, str, str] | None = None
    for alias in entry.aliases:
        verdict = judge.judge(op.content, op.section, alias, entry.section)
        if verdict.kind == "conflict":
            return None
        if verdict.kind == "same" and (best is None or verdict.score > best[0]):
            best = (verdict.score, alias, verdict.reason)
    if best is not None:
        return Judgement("same", best[0], f"{ALIAS_REASON} {best[1]!r} of {entry.entry_id} ({best[2]}): folded on "
                         "a match no one confirmed", reinforces=False)
    if not entry.aliases or not isinstance(judge, GroupJudge):
        return None
    verdict = judge.judge_group(op.content, op.section, [entry.content, *entry.aliases])
    if verdict.kind != "same":
        return None
    return Judgement("same", verdict.score, f"{ALIAS_REASON}es of {entry.entry_id} with its text, together "
                     f"({verdict.reason}): folded on a match no one confirmed", reinforces=False)


def actions_differ(judge: Judge, op: AddOp, entry: PlaybookEntry) -> str | None:
    """Why ``op`` does not say to do what ``entry``'s text says (or None): both state a scope, and the judge, reading
    what each says to do there alone (the scopes taken off: ``scope.split_scope``), does not call it one. An alias
    may carry the entry's lesson to other wordings of its scope, not to another action under a close scope; when
    either text states no scope the rest would be the whole text, judged already, so nothing is said."""
    mine, theirs = split_scope(op.content), split_scope(entry.content)
    if mine is None or theirs is None:
        return None
    try:
        judge.prepare([mine[1], theirs[1]])
        verdict = judge.judge(mine[1], op.section, theirs[1], entry.section)
    except EmbeddingError as error:
        logger.warning("action test skipped: %s", error)
        return None
    if verdict.kind == "same":
        return None
    return f"another action: {mine[1]!r} vs {theirs[1]!r} ({verdict.kind}: {verdict.reason})"


def with_alias(entry: PlaybookEntry, wording: str, new_version: int) -> tuple[PlaybookEntry, str]:
    """``entry`` with ``wording`` kept as an alias, and a note for the operation's reason ("" when nothing to say):
    the entry's own text and its aliases are not stored again; past :data:`MAX_ALIASES` the wording is not kept."""
    if wording == entry.content or wording in entry.aliases:
        return entry, ""
    if len(entry.aliases) >= MAX_ALIASES:
        return entry, (f"; alias bound: {entry.entry_id} holds its {MAX_ALIASES} aliases, this wording is not kept "
                       "as one")
    return (entry.model_copy(update={"aliases": [*entry.aliases, wording], "updated_version": new_version}),
            f"; kept as alias {len(entry.aliases) + 1} of {entry.entry_id}")


def merged_aliases(content: str, merged: Iterable[PlaybookEntry]) -> tuple[list[str], str]:
    """The aliases of a MERGE's kept entry (the merged entries' aliases in order, without repeats or the new
    text, at most :data:`MAX_ALIASES`), and a note when the bound dropped some."""
    union = list(dict.fromkeys(a for entry in merged for a in entry.aliases if a != content))
    if len(union) <= MAX_ALIASES:
        return union, ""
    return union[:MAX_ALIASES], (f"; alias bound: {len(union) - MAX_ALIASES} of the merged entries' {len(union)} "
                                 f"aliases not kept (at most {MAX_ALIASES})")


def alias_texts(entries: Iterable[PlaybookEntry]) -> list[str]:
    """Every alias of ``entries`` (what the judge must embed beside the entries' texts)."""
    return [alias for entry in entries for alias in entry.aliases]


def split_alias(judge: Judge, op: AddOp, entry: PlaybookEntry, new_version: int
                ) -> tuple[PlaybookEntry, list[str]] | None:
    """``entry`` without the aliases that ``op`` shows to be a lesson of their own, and those aliases (the closest
    first); None when ``op`` shows none. ``op`` (which the judge found distinct from the entry's text) must state the
    lesson of an alias (the closest; a conflict with any alias shows nothing). That alias is split off alone when
    neither ``op`` nor it is the lesson of the entry's other wordings together (its text and other aliases); else
    every alias ``op`` restates is split off with it when the judge, comparing lessons
    (:class:`~combee_core.playbook.meaning.LessonsJudge`), calls ``op`` with those aliases and the entry's other
    wordings two lessons, both ways (consolidation would not merge them back). A judge that cannot compare
    against several wordings splits nothing."""
    if not isinstance(judge, GroupJudge) or not compares_groups(judge):
        return None
    restated: list[tuple[float, str]] = []
    for alias in entry.aliases:
        verdict = judge.judge(op.content, op.section, alias, entry.section)
        if verdict.kind == "conflict":
            return None
        if verdict.kind == "same":
            restated.append((verdict.score, alias))
    if not restated:
        return None
    best = max(restated, key=lambda found: found[0])[1]  # the closest, ties to the first stored
    others = [entry.content, *(a for a in entry.aliases if a != best)]
    parted: list[str] | None = [best]
    if any(judge.judge_group(text, section, others).kind == "same"
           for text, section in ((op.content, op.section), (best, entry.section))):
        parted = _lesson_apart(judge, op, entry, [a for _, a in restated])
    if parted is None:
        return None
    parted.sort(key=lambda alias: alias != best)
    return entry.model_copy(update={"aliases": [a for a in entry.aliases if a not in parted],
                                    "updated_version": new_version}), parted


def _lesson_apart(judge: Judge, op: AddOp, entry: PlaybookEntry, restated: list[str]) -> list[str] | None:
    """``restated`` (the aliases ``op`` restates) when the judge calls them with ``op`` and the entry's other
    wordings two lessons, both ways; else None."""
    if not compares_lessons(judge) or not isinstance(judge, LessonsJudge):  # a wrapper answers for its inner judge
        return None
    mine = [op.content, *restated]
    rest = [entry.content, *(a for a in entry.aliases if a not in restated)]
    if any(judge.judge_lessons(texts, others).kind != "distinct"  # a contested or conflicting pair is no split
           for texts, others in ((rest, mine), (mine, rest))):
        return None
    return list(restated)
