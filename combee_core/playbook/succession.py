"""A rule removed as wrong is succeeded by its strongest pending correction.

A pending challenge (``combee_core.playbook.challenges``) is an ADD held back only by the entry it contradicts, with
support in distinct traces. When that entry is removed *as wrong* (demoted by outcomes,
``combee_core.reduce.demotion``, or deleted by a reducer model's DELETE), what held the correction back is gone: its
strongest pending challenge (most support, then the earliest, then its text) enters as an entry with the evidence it
accumulated (``helpful = support - 1``, its creation counting one, as a challenge that wins does), recorded as an
applied ADD whose reason names the removal. Not when an entry already states it (its text or an alias word for word,
or the judge calls them one lesson): the lesson is not lost. The entry's other challenges end with it. No other
removal passes a challenge on: an entry evicted by the token budget is not shown wrong; one superseded by a challenge
was removed by that challenge (the winner enters with its evidence); MERGE re-points challenges
(``consolidation``). Adding an entry changes no entry of the previous version, so the change caps are not used;
the budget may evict the heir like any entry. Pure: the same challenges, entries and judge give the same heir.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from combee_core.models import AddOp, AppliedOperation, Challenge, PlaybookEntry
from combee_core.playbook.challenges import own_wording
from combee_core.playbook.meaning import Judge
from combee_core.playbook.value import Playbook, entry_sort_key, make_entry_id


def heir(challenges: Sequence[Challenge], removed: PlaybookEntry, entries: Iterable[PlaybookEntry],
         judge: Judge) -> Challenge | None:
    """The strongest challenge pending against ``removed`` (as it was challenged: same text), or None when it has
    none or one of ``entries`` already states it."""
    mine = [c for c in challenges if c.entry_id == removed.entry_id and c.entry_content == removed.content]
    if not mine:
        return None
    best = min(mine, key=lambda c: (-c.support, c.first_version, c.content, c.section))
    others = list(entries)
    if any(own_wording(entry, best.content) is not None for entry in others):
        return None
    judge.prepare([entry.content for entry in others])
    if any(judge.judge(best.content, best.section, entry.content, entry.section).kind == "same" for entry in others):
        return None
    return best


def heir_of(challenge: Challenge, removed: PlaybookEntry, number: int, version: int, how: str
            ) -> tuple[PlaybookEntry, AppliedOperation]:
    """The entry ``challenge`` becomes (entry number ``number``: its text, with the evidence it accumulated) and the
    applied ADD that records it, and why."""
    entry_id = make_entry_id(challenge.section, number)
    entry = PlaybookEntry(entry_id=entry_id, section=challenge.section, content=challenge.content,
                          helpful=challenge.support - 1, created_version=version, updated_version=version)
    record = AppliedOperation(
        operation=AddOp(section=challenge.section, content=challenge.content, support=challenge.support),
        outcome="applied", entry_id=entry_id, reason=(
            f"added: the strongest correction pending against {removed.entry_id}, which was {how} (challenge "
            f"support {challenge.support} distinct traces, v{challenge.first_version}-v{challenge.last_version}), "
            f"enters with its evidence: helpful {challenge.support - 1}"))
    return entry, record


def succeed_removed(playbook: Playbook, removed: Sequence[PlaybookEntry], version: int, judge: Judge,
                    how: str) -> tuple[Playbook, list[AppliedOperation]]:
    """``playbook`` (without the ``removed`` entries, its challenges still holding theirs) with each removed entry's
    heir added in ``removed``'s order, and the applied ADDs that record them."""
    entries = list(playbook.entries)
    challenges = list(playbook.challenges)
    number = playbook.next_entry_number
    records: list[AppliedOperation] = []
    for entry in removed:
        challenge = heir(challenges, entry, entries, judge)
        if challenge is None:
            continue
        challenges.remove(challenge)
        heir_entry, record = heir_of(challenge, entry, number, version, how)
        number += 1
        entries.append(heir_entry)
        records.append(record)
    if not records:
        return playbook, []
    return replace(playbook, entries=tuple(sorted(entries, key=entry_sort_key)), next_entry_number=number,
                   challenges=tuple(challenges)), records
