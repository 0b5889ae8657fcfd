"""Which entries the budget may evict first: a lesson's last entry goes only when no restated lesson's entry can.

The budget's ranking (``combee_core.reduce.budget``: outcome credit, then evidence of use, then support, then uses,
never oldest-first) says which entry is worth least. Ranked alone, it can evict the only entry standing for a lesson
while another lesson is held twice (two wordings the judge calls one lesson, kept as two entries because they
arrived in different versions or a reducer call applied them one at a time): the first loses a lesson agents are
then never served, the second only tokens. So eviction goes in two passes over the same ranking:

1. *spare* entries: an entry another remaining entry restates (the judge calls the two one lesson, either way
   round) may go, lowest value first; once one of two wordings has gone, the other is its lesson's last and waits;
2. only when no spare entry can go (none left, or the caps keep them) does the ranking reach a lesson's last entry.

"One lesson" is the judge curation already consults (``combee_core.playbook.meaning``), pair by pair, not chained
(A restating B and B restating C does not make A spare once B has gone). A rule and the rule it contradicts are
two lessons here: which of them stands is the challenge's to settle (``combee_core.playbook.challenges``), never the
budget's. Pure: the same entries and judge give the same answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from combee_core.models import PlaybookEntry
from combee_core.playbook.meaning import Judge
from combee_core.playbook.value import entry_sort_key

Restated = Mapping[str, frozenset[str]]
"""Entry id -> the ids of the other entries the judge calls its lesson."""


def restated_by(entries: Sequence[PlaybookEntry], judge: Judge) -> dict[str, frozenset[str]]:
    """Per entry, the other entries stating its lesson: the pairs the judge calls "same" (either way round; a
    conflict or "distinct" is two lessons). Every entry has a key (an empty set: its lesson's only entry)."""
    ordered = sorted(entries, key=entry_sort_key)
    judge.prepare([entry.content for entry in ordered])
    found: dict[str, set[str]] = {entry.entry_id: set() for entry in ordered}
    for n, first in enumerate(ordered):
        for second in ordered[n + 1:]:
            if (judge.judge(second.content, second.section, first.content, first.section).kind == "same"
                    or judge.judge(first.content, first.section, second.content, second.section).kind == "same"):
                found[first.entry_id].add(second.entry_id)
                found[second.entry_id].add(first.entry_id)
    return {entry_id: frozenset(others) for entry_id, others in found.items()}


def is_spare(entry_id: str, remaining: Collection[str], restated: Restated) -> bool:
    """True when another of the ``remaining`` entries states ``entry_id``'s lesson: evicting it loses no lesson."""
    return any(other != entry_id and other in remaining for other in restated.get(entry_id, frozenset()))


def last_of_lesson(entry_ids: Collection[str], restated: Restated) -> list[str]:
    """Of ``entry_ids``, those no other of them restates (each the last entry standing for its lesson)."""
    return [entry_id for entry_id in entry_ids if not is_spare(entry_id, entry_ids, restated)]
