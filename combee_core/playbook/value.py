"""The playbook as a value: entry ids, the order of entries, and :class:`Playbook`, whose constructor checks the
invariants.

Entry ids are ``<first 3 chars of section>-<5+ digit counter>`` (``for-00001``). The counter is playbook-wide and
only grows, so an id is never reused after its entry is deleted or merged away.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from combee_core.errors import CombeeError
from combee_core.models import AppliedOperation, Challenge, CurationState, OutcomeTally, PlaybookEntry

ID_PREFIX_CHARS = 3
ID_COUNTER_DIGITS = 5

_ID_COUNTER = re.compile(r"-(\d+)$")


class PlaybookError(CombeeError, ValueError):
    """A playbook value that breaks an invariant (duplicate ids, bad order, bad version)."""


def entry_id_prefix(section: str) -> str:
    """The id prefix of a section: its first three characters (``formulas`` -> ``for``)."""
    return section[:ID_PREFIX_CHARS]


def make_entry_id(section: str, number: int) -> str:
    """The id of the ``number``-th entry ever created in a playbook, in ``section``."""
    return f"{entry_id_prefix(section)}-{number:0{ID_COUNTER_DIGITS}d}"


def entry_id_number(entry_id: str) -> int | None:
    """The counter of an id made by :func:`make_entry_id`, or ``None`` for an id without one."""
    match = _ID_COUNTER.search(entry_id)
    return int(match.group(1)) if match else None


def entry_sort_key(entry: PlaybookEntry) -> tuple[str, int, str]:
    """Section, then counter (numerically, so ``for-100000`` follows ``for-99999``), then the id itself."""
    number = entry_id_number(entry.entry_id)
    return (entry.section, -1 if number is None else number, entry.entry_id)


def merged_entry(keep: PlaybookEntry, merged: Iterable[PlaybookEntry], content: str, new_version: int,
                 aliases: list[str]) -> PlaybookEntry:
    """``keep`` as a MERGE of ``merged`` leaves it: ``content``, the summed counters and outcome counts of all the
    merged entries, ``aliases``, updated in ``new_version``."""
    merged = list(merged)
    counters = {name: sum(getattr(e, name) for e in merged) for name in ("helpful", "harmful", "used_helpful",
                                                                           "used_harmful")}
    outcome = OutcomeTally(successes=sum(e.outcome.successes for e in merged),
                           failures=sum(e.outcome.failures for e in merged))
    return keep.model_copy(update={"content": content, **counters, "outcome": outcome, "updated_version": new_version,
                                   "aliases": aliases})


def entry_value(entry: PlaybookEntry) -> tuple[int, tuple[str, int, str]]:
    """Priority key: higher ``helpful - harmful`` first, then playbook order."""
    return (-(entry.helpful - entry.harmful), entry_sort_key(entry))


@dataclass(frozen=True, slots=True)
class Playbook:
    """A playbook version as a value: entries ordered by section then id, and the next id counter.

    Construct with :meth:`empty` or :meth:`from_entries`; change with :func:`apply_operations`, which returns a
    new ``Playbook``. The constructor checks the invariants and raises :class:`PlaybookError`.
    """

    playbook_id: str
    version: int
    entries: tuple[PlaybookEntry, ...]
    next_entry_number: int
    baseline: OutcomeTally = field(default_factory=OutcomeTally)
    """Outcomes of all the playbook's traces (``combee_core.playbook.outcomes``)."""
    challenges: tuple[Challenge, ...] = ()
    """Corrections pending against entries (``combee_core.playbook.challenges``)."""
    curation: CurationState = field(default_factory=CurationState, compare=False)
    """What curation carries from the version this value is (``PlaybookVersion.curation``) to the next."""

    def __post_init__(self) -> None:
        if self.version < 0:
            raise PlaybookError(f"version must be >= 0, got {self.version}")
        keys = [entry_sort_key(e) for e in self.entries]
        if keys != sorted(keys):
            raise PlaybookError("entries must be ordered by section then entry id")
        seen: dict[str, None] = {}
        for entry in self.entries:
            if entry.entry_id in seen:
                raise PlaybookError(f"duplicate entry id {entry.entry_id!r}")
            seen[entry.entry_id] = None
            number = entry_id_number(entry.entry_id)
            if number is not None and number >= self.next_entry_number:
                raise PlaybookError(
                    f"next_entry_number {self.next_entry_number} would reuse the counter of {entry.entry_id!r}"
                )

    @classmethod
    def empty(cls, playbook_id: str) -> Playbook:
        """The version-0 playbook with no entries."""
        return cls(playbook_id=playbook_id, version=0, entries=(), next_entry_number=1)

    @classmethod
    def from_entries(
        cls,
        playbook_id: str,
        version: int,
        entries: Iterable[PlaybookEntry],
        next_entry_number: int | None = None,
        curation: CurationState | None = None,
        *,
        baseline: OutcomeTally | None = None,
        challenges: Iterable[Challenge] = (),
    ) -> Playbook:
        """Rebuild a playbook (e.g. from a published ``PlaybookVersion``); entries may come in any order.

        The counter becomes one past the largest id counter present, or ``next_entry_number`` when that is
        larger. Pass it when known: if the newest entries were deleted, the entries alone cannot tell how far
        the counter went, and their ids would otherwise be handed out again. ``baseline`` and ``challenges``: the
        version's outcome baseline and pending challenges (``PlaybookVersion``), so a restart curates as before.
        """
        ordered = tuple(sorted(entries, key=entry_sort_key))
        numbers = [n for n in (entry_id_number(e.entry_id) for e in ordered) if n is not None]
        derived = max(numbers, default=0) + 1
        return cls(
            playbook_id=playbook_id,
            version=version,
            entries=ordered,
            next_entry_number=max(derived, next_entry_number or 1),
            baseline=baseline or OutcomeTally(),
            challenges=tuple(challenges),
            curation=curation or CurationState(),
        )

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def entry_ids(self) -> tuple[str, ...]:
        """Entry ids in playbook order."""
        return tuple(e.entry_id for e in self.entries)

    @property
    def sections(self) -> tuple[str, ...]:
        """Sections that have at least one entry, in order."""
        return tuple(dict.fromkeys(e.section for e in self.entries))

    def get(self, entry_id: str) -> PlaybookEntry | None:
        """The entry with this id, or ``None``."""
        for entry in self.entries:
            if entry.entry_id == entry_id:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The playbook after a list of operations, and what became of each operation (same order as input)."""

    playbook: Playbook
    applied: list[AppliedOperation] = field(default_factory=list)
    changed: tuple[str, ...] = ()
    """Entries of the playbook the operations applied to that were rewritten or removed (each once, in order)."""
    superseded: list[AppliedOperation] = field(default_factory=list)
    """DELETEs of the entries a contradicting ADD superseded (each named in that ADD's reason), to record after
    ``applied``."""
    consolidated: list[AppliedOperation] = field(default_factory=list)
    """MERGEs of entries whose wordings the judge calls one lesson (``combee_core.playbook.consolidation``), to record
    after ``superseded``."""
    succeeded: list[AppliedOperation] = field(default_factory=list)
    """ADDs of the heirs of entries a DELETE removed (``combee_core.playbook.succession``), to record after
    ``superseded``."""
