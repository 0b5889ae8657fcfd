"""Which proposals the review page's inbox lists: filtered by section, review state and search text, one page at a
time or one proposal at a time (the focused view); the scopes (playbooks of one parent chain) the page offers (no
Kafka)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args
from urllib.parse import urlencode

from combee_core.serve.review import ProposalRow, ReviewInputError, Status
from combee_core.serve.scopes import scope_chain

MAX_SEARCH_CHARS = 200
PAGE_SIZE = 50
"""Proposals per inbox page."""
STATES: tuple[str, ...] = tuple(state for state in get_args(Status) if state != "superseded")
"""The states an inbox filter offers: of the served version's texts (a superseded one is no longer served)."""


@dataclass(frozen=True)
class InboxQuery:
    """The inbox filter as the page's address gives it: ``?section=&state=&page=&q=``."""

    section: str = ""
    """"" : every section."""
    state: str = "proposed"
    page: int = 1
    q: str = ""
    """Search: every word of it (any case) appears in the entry's text, id or section ("" : no search)."""

    @classmethod
    def parse(cls, section: str, state: str, page: str, q: str = "") -> InboxQuery:
        """From the query's strings; :class:`ReviewInputError` (one line) for a state or page it cannot be."""
        state = state or "proposed"
        if state not in STATES:
            raise ReviewInputError(f"no review state {state!r}: choose {', '.join(STATES)}")
        if page and not (page.isdigit() and int(page) >= 1):
            raise ReviewInputError(f"page {page!r} is not a page number (1, 2, ...)")
        if len(q) > MAX_SEARCH_CHARS:
            raise ReviewInputError(f"the search is longer than {MAX_SEARCH_CHARS} characters")
        return cls(section=section, state=state, page=int(page) if page else 1, q=" ".join(q.split()))

    def matches(self, row: ProposalRow) -> bool:
        """Whether the served version's proposal ``row`` is in this filter (the page is not)."""
        if not row.current or row.status != self.state or (self.section and row.section != self.section):
            return False
        text = f"{row.entry_id} {row.section} {row.content} {row.edited_to or ''}".casefold()
        return all(word in text for word in self.q.casefold().split())

    def address(self, **more: str | int) -> str:
        """The query string of this filter (and ``more``), for links and redirects that keep it."""
        fields: dict[str, str | int] = {"section": self.section, "state": self.state, "page": self.page}
        if self.q:
            fields["q"] = self.q
        return urlencode({**fields, **more})


@dataclass(frozen=True)
class InboxPage:
    rows: list[ProposalRow]
    """This page's proposals."""
    matching: int
    """Proposals the filter matches on every page."""
    page: int
    pages: int
    first: int
    """1-based position of this page's first proposal (0 when none match)."""


def inbox_page(rows: Sequence[ProposalRow], query: InboxQuery, size: int = PAGE_SIZE) -> InboxPage:
    """The served version's proposals in ``query.state`` and ``query.section``, page ``query.page`` (a page past the
    last shows the last)."""
    matching = [row for row in rows if query.matches(row)]
    pages = max(1, -(-len(matching) // size))
    page = min(query.page, pages)
    start = (page - 1) * size
    return InboxPage(rows=matching[start:start + size], matching=len(matching), page=page, pages=pages,
                     first=start + 1 if matching else 0)


def sections_of(rows: Sequence[ProposalRow]) -> list[str]:
    """The sections of the served version's proposals, sorted: the filter's choices."""
    return sorted({row.section for row in rows if row.current})


@dataclass(frozen=True)
class Focused:
    """The focused view's proposal: one of the filter's, with its neighbours."""

    row: ProposalRow | None
    """None: nothing matches."""
    at: int
    """1-based position among the matching (0 when none)."""
    matching: int
    previous_at: int | None
    next_at: int | None


def focused(rows: Sequence[ProposalRow], query: InboxQuery, at: int, after: str = "") -> Focused:
    """The ``at``-th proposal the filter matches (past the last: the last). ``after``: the entry just decided; when it
    is still at ``at`` (deciding it again left it in the filter), the one after it, so decide-and-next moves on."""
    matching = [row for row in rows if query.matches(row)]
    if not matching:
        return Focused(None, 0, 0, None, None)
    at = min(max(at, 1), len(matching))
    if after and matching[at - 1].entry_id == after and at < len(matching):
        at += 1
    return Focused(matching[at - 1], at, len(matching), at - 1 if at > 1 else None,
                   at + 1 if at < len(matching) else None)


def scope_choices(playbook_id: str, parents: Mapping[str, str]) -> list[str]:
    """The scopes the page's filter offers: the playbook, its ancestors (nearest first), then the playbooks below it
    (``COMBEE_PLAYBOOK_PARENTS``), sorted; just the playbook without parents."""
    below = sorted(child for child in parents if child != playbook_id and playbook_id in scope_chain(child, parents))
    return [*scope_chain(playbook_id, parents), *below]
