"""The inbox filter by section and review state, and its paging."""

from __future__ import annotations

import pytest

from combee_core.serve.review import ProposalRow, ReviewInputError
from combee_core.serve.review_inbox import InboxQuery, inbox_page, sections_of


def row(i: int, section: str, status: str = "proposed", current: bool = True) -> ProposalRow:
    return ProposalRow(entry_id=f"e{i}", section=section, content=f"Lesson {i}.", proposal=f"{i:016x}",
                       first_version=1, status=status, current=current)


ROWS = [row(i, "tools" if i % 2 else "dates", "rejected" if i % 5 == 0 else "proposed") for i in range(1, 121)] + \
    [row(999, "tools", "superseded", current=False)]


def test_the_filter_keeps_one_section_and_state_and_pages_through_them_without_losing_one():
    query = InboxQuery(section="tools", state="proposed")
    wanted = [r.entry_id for r in ROWS if r.section == "tools" and r.status == "proposed" and r.current]
    first = inbox_page(ROWS, query, size=20)
    assert first.matching == len(wanted) == 48 and first.pages == 3 and first.first == 1
    seen = [r.entry_id for n in (1, 2, 3) for r in inbox_page(ROWS, InboxQuery("tools", "proposed", n), 20).rows]
    assert seen == wanted  # every one once, in order
    assert inbox_page(ROWS, InboxQuery("tools", "proposed", 9), 20).page == 3  # past the end: the last page
    rejected = inbox_page(ROWS, InboxQuery(state="rejected"), 50)
    assert [r.entry_id for r in rejected.rows] == [f"e{i}" for i in range(5, 121, 5)]
    assert inbox_page(ROWS, InboxQuery(section="none"), 50).matching == 0
    assert inbox_page(ROWS, InboxQuery(section="none"), 50).first == 0
    assert sections_of(ROWS) == ["dates", "tools"]


def test_a_query_the_filter_cannot_be_is_one_plain_sentence():
    assert InboxQuery.parse("", "", "") == InboxQuery()
    assert InboxQuery.parse("tools", "approved", "2") == InboxQuery("tools", "approved", 2)
    with pytest.raises(ReviewInputError, match="^no review state 'maybe': choose proposed, approved, rejected$"):
        InboxQuery.parse("", "maybe", "")
    with pytest.raises(ReviewInputError, match="is not a page number"):
        InboxQuery.parse("", "", "0")


def test_the_page_lists_the_filtered_page_with_links_that_keep_the_filter():
    from combee_core.serve.review import review_state
    from streams.review.log import ReviewSnapshot
    from streams.review.page import playbook_page
    from tests.unit.test_review import entry, version

    v = version(1, [entry(f"e{i:03d}", f"Lesson number {i}.", 1, "tools" if i % 2 else "dates") for i in range(120)])
    shot = ReviewSnapshot(playbook_id="pb", versions=[v], promotions=[], decisions=[], served=v, previous=None,
                          state=review_state("pb", [v], v, []))
    html = playbook_page(shot, review_mode=True, reviewer="a", csrf="t",
                         query=InboxQuery(section="tools", state="proposed", page=2))
    assert "id=inbox-count>120<" in html  # the count is the whole inbox
    assert "51-60 of 60 (page 2 of 2)" in html and "id=page-next" not in html
    assert "href='/p/pb?section=tools&amp;state=proposed&amp;page=1'" in html
    listed = [part.split("'")[0] for part in html.split("<tr id='row-")[1:]]
    assert len(listed) == 10 and all(int(entry_id[1:]) % 2 for entry_id in listed)
    assert "<option value='tools' selected>tools</option>" in html
    assert "No proposal matches the filter." in playbook_page(shot, review_mode=True, reviewer="a", csrf="t",
                                                              query=InboxQuery(state="approved"))
