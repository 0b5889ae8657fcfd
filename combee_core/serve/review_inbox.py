"""Which proposals the review page's inbox lists: filtered by section and review state, one page at a time (no
Kafka)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

from combee_core.serve.review import ProposalRow, ReviewInputError, Status

PAGE_SIZE = 50
"""Proposals per inbox page."""
STATES: tuple[str, ...] = tuple(state for state in get_args(Status) if state != "superseded")
"""The states an inbox filter offers: of the served version's texts (a superseded one is no longer served)."""


@dataclass(frozen=True)
class InboxQuery:
    """The inbox filter as the page's address gives it: ``?section=&state=&page=``."""

    section: str = ""
    """"" : every section."""
    state: str = "proposed"
    page: int = 1

    @classmethod
    def parse(cls, section: str, state: str, page: str) -> InboxQuery:
        """From the query's strings; :class:`ReviewInputError` (one line) for a state or page it cannot be."""
        state = state or "proposed"
        if state not in STATES:
            raise ReviewInputError(f"no review state {state!r}: choose {', '.join(STATES)}")
        if page and not (page.isdigit() and int(page) >= 1):
            raise ReviewInputError(f"page {page!r} is not a page number (1, 2, ...)")
        return cls(section=section, state=state, page=int(page) if page else 1)


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
    matching = [row for row in rows if row.current and row.status == query.state
                and (not query.section or row.section == query.section)]
    pages = max(1, -(-len(matching) // size))
    page = min(query.page, pages)
    start = (page - 1) * size
    return InboxPage(rows=matching[start:start + size], matching=len(matching), page=page, pages=pages,
                     first=start + 1 if matching else 0)


def sections_of(rows: Sequence[ProposalRow]) -> list[str]:
    """The sections of the served version's proposals, sorted: the filter's choices."""
    return sorted({row.section for row in rows if row.current})
