"""The review page's focused view, search, scope filter, undo and the return to the same filter after a decision:
the pure parts, the HTML, and ``combee ui``'s server with its topic reads stubbed by an in-memory review log."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from combee_core.models import ReviewDecision
from combee_core.serve.review import ProposalRow, ReviewInputError, review_state
from combee_core.serve.review_inbox import InboxQuery, focused, inbox_page, scope_choices
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.review import server as review_server
from streams.review.focus import focus_page
from streams.review.forms import KEYS_PATH
from streams.review.log import ReviewSnapshot
from streams.review.page import playbook_page
from streams.review.server import ReviewServer
from tests.unit.test_review import decide, entry, version

V = version(1, [entry("e1", "Check the units first.", 1, "math"), entry("e2", "Round at the very end.", 1, "math"),
                entry("e3", "Sort dates ascending.", 1, "dates"),
                entry("e4", "<script>alert(1)</script> units & 'quotes'", 1, "dates")])


def snap(decisions: list[ReviewDecision]) -> ReviewSnapshot:
    return ReviewSnapshot(playbook_id="pb", versions=[V], promotions=[], decisions=decisions, served=V, previous=None,
                          state=review_state("pb", [V], V, decisions))


def row(i: int) -> ProposalRow:
    return ProposalRow(entry_id=f"e{i}", section="s", content=f"Lesson {i}.", proposal=f"{i:016x}", first_version=1,
                       status="proposed", current=True)


def test_search_keeps_the_proposals_holding_every_word_in_any_case():
    rows = snap([]).state.proposals
    assert [r.entry_id for r in inbox_page(rows, InboxQuery(q="UNITS")).rows] == ["e1", "e4"]
    assert [r.entry_id for r in inbox_page(rows, InboxQuery(q="units first")).rows] == ["e1"]
    assert [r.entry_id for r in inbox_page(rows, InboxQuery(section="dates", q="units")).rows] == ["e4"]
    assert inbox_page(rows, InboxQuery(q="nowhere")).matching == 0
    assert InboxQuery.parse("", "", "", "  units   first ") == InboxQuery(q="units first")
    with pytest.raises(ReviewInputError, match="^the search is longer than 200 characters$"):
        InboxQuery.parse("", "", "", "x" * 201)
    assert InboxQuery(section="a b", q="x&y").address(at=2) == "section=a+b&state=proposed&page=1&q=x%26y&at=2"


def test_the_focused_view_moves_on_after_a_decision_and_stops_at_the_ends():
    rows = [row(i) for i in range(1, 6)]
    first = focused(rows, InboxQuery(), 1)
    assert (first.row.entry_id, first.at, first.matching, first.previous_at, first.next_at) == ("e1", 1, 5, None, 2)
    assert focused(rows, InboxQuery(), 9).row.entry_id == "e5"  # past the end: the last
    # e2 decided and gone from the filter: the same position shows the next one
    assert focused([r for r in rows if r.entry_id != "e2"], InboxQuery(), 2, after="e2").row.entry_id == "e3"
    # e2 decided but still in the filter (decided again in its own state): the view moves past it
    assert focused(rows, InboxQuery(), 2, after="e2").row.entry_id == "e3"
    assert focused([], InboxQuery(), 1).row is None


def test_the_scope_filter_offers_the_playbooks_chain_and_those_below_it():
    parents = {"tenant-a": "shared", "tenant-b": "shared", "shared": "org"}
    assert scope_choices("tenant-a", parents) == ["tenant-a", "shared", "org"]
    assert scope_choices("shared", parents) == ["shared", "org", "tenant-a", "tenant-b"]
    assert scope_choices("solo", {}) == ["solo"]


def test_the_focused_page_escapes_the_entry_and_marks_its_keys():
    shot = snap([])
    found = focused(shot.state.proposals, InboxQuery(q="units"), 2)
    html = focus_page(shot, found, InboxQuery(q="units"), reviewer="Jane Doe", csrf="tok")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert f"<script src='{KEYS_PATH}' defer></script>" in html and html.count("<script") == 1  # no inline script
    for key in ("a", "r", "e", "k", "/"):
        assert f"data-key={key}" in html or f"data-key='{key}'" in html
    assert "data-key=j" not in html  # the last match: no next
    assert "<b id=focus-at>2 of 2</b>" in html and "Deciding as <b id=reviewer>Jane Doe</b>" in html
    assert "name='back_q' value='units'" in html and "name='back_view' value='focus'" in html
    assert "name='back_at' value='2'" in html and "value='reject:e4'" in html
    assert "No proposal matches the filter." in focus_page(shot, focused([], InboxQuery(q="x"), 1),
                                                           InboxQuery(q="x"), reviewer="a", csrf="t")


def test_the_page_offers_undo_on_each_decision_that_counts_and_strikes_the_undone():
    from tests.unit.test_review_undo import undo

    approve, reject = decide(V, "approve", "e1"), decide(V, "reject", "e2", note="vague", minute=1)
    log = [approve, reject]
    log.append(undo(log, reject.decision_id))
    html = playbook_page(snap(log), review_mode=True, reviewer="Jane Doe", csrf="tok", done="approve e1 by a",
                         undo_id=approve.decision_id, query=InboxQuery(q="units"))
    assert html.count("action='/p/pb/undo'") == 2  # the flash's and the approval's row: not the undone, not the undo
    assert f"name=undo value='{approve.decision_id}' data-key=u id=undo-last" in html
    assert f"id='decision-{reject.decision_id[:12]}' class=undone" in html
    assert f"undo of {reject.decision_id[:12]}" in html
    assert "id=search value='units'" in html and "name='back_q' value='units'" in html
    form = html[html.index("id=inbox>"):]
    assert form.index("id=no-enter") < form.index("<button name=one")  # Enter in a note field submits nothing
    # an undo id from the address that no longer counts shows no button
    gone = playbook_page(snap(log), review_mode=True, reviewer="a", csrf="t", done="x", undo_id=reject.decision_id)
    assert "id=undo-last" not in gone


@contextlib.asynccontextmanager
async def ui(monkeypatch, parents: str = "") -> AsyncIterator[tuple[ReviewServer, list[ReviewDecision]]]:
    """``combee ui`` over an in-memory review log (what it writes, it reads back)."""
    log: list[ReviewDecision] = []

    async def read_snapshot(settings, bootstrap, profile, playbook_id):
        return snap(list(log))

    async def write_decision(settings, bootstrap, profile, decision):
        log.append(decision)

    monkeypatch.setattr(review_server, "read_snapshot", read_snapshot)
    monkeypatch.setattr(review_server, "write_decision", write_decision)
    settings = CombeeSettings.load(env={}, ui_port=0, embedding_model="none", playbook_parents=parents)
    async with ReviewServer(settings, "127.0.0.1:9", BrokerProfile.for_tansu(), "reviewer@host") as server:
        yield server, log


def _query(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


async def test_a_decision_returns_to_the_same_filter_search_and_page_and_can_be_undone(monkeypatch):
    async with ui(monkeypatch) as (server, log), aiohttp.ClientSession() as client:
        back = {"back_section": "dates", "back_state": "proposed", "back_q": "units", "back_page": "1",
                "back_view": "list", "back_at": "0"}
        form = {"csrf": server.csrf, "one": "approve:e4", "version": "1", "reviewer": "Jane Doe", **back}
        async with client.post(f"{server.url}p/pb/decide", data=form, allow_redirects=False) as answer:
            assert answer.status == 303
            location = answer.headers["Location"]
        assert urlsplit(location).path == "/p/pb"
        assert _query(location) | {"undo": ""} == {"section": "dates", "state": "proposed", "q": "units", "page": "1",
                                                   "done": "approve e4 by Jane Doe", "undo": ""}
        assert _query(location)["undo"] == log[0].decision_id
        async with client.get(f"{server.url}{location.lstrip('/')}") as page:
            html = await page.text()
        assert "id=undo-last" in html and "Jane Doe" in html  # the name kept for this browser
        undo = {"csrf": server.csrf, "decision": log[0].decision_id, "reviewer": "Jane Doe", **back}
        async with client.post(f"{server.url}p/pb/undo", data=undo, allow_redirects=False) as answer:
            assert answer.status == 303 and _query(answer.headers["Location"])["done"] == "undid approve e4 by Jane Doe"
        assert [(d.action, d.undoes) for d in log] == [("approve", None), ("undo", log[0].decision_id)]
        async with client.post(f"{server.url}p/pb/undo", data=undo, allow_redirects=False) as answer:
            assert answer.status == 400 and "was already undone by Jane Doe" in await answer.text()
        async with client.post(f"{server.url}p/pb/undo", data={**undo, "csrf": "stale"}) as answer:
            assert answer.status == 403
        assert len(log) == 2


async def test_decide_and_next_in_the_focused_view(monkeypatch):
    async with ui(monkeypatch) as (server, log), aiohttp.ClientSession() as client:
        async with client.get(f"{server.url}p/pb/focus?state=proposed&at=1") as page:
            assert page.status == 200 and "id='focus-e1'" in await page.text()
        back = {"back_state": "proposed", "back_view": "focus", "back_at": "1", "back_page": "1"}
        form = {"csrf": server.csrf, "one": "approve:e1", "version": "1", "reviewer": "Jane Doe", **back}
        async with client.post(f"{server.url}p/pb/decide", data=form) as page:  # follows the redirect
            html = await page.text()
        assert urlsplit(str(page.url)).path == "/p/pb/focus" and "id='focus-e2'" in html and "1 of 3" in html
        async with client.get(f"{server.url}p/pb/focus?at=x") as page:
            assert page.status == 400 and "is not a position" in await page.text()
        async with client.get(f"{server.url}{KEYS_PATH.lstrip('/')}") as script:
            assert script.content_type == "text/javascript" and "data-key" in await script.text()
            assert "script-src 'self'" in script.headers["Content-Security-Policy"]


async def test_choosing_another_scope_opens_its_page_with_the_same_filter(monkeypatch):
    async with ui(monkeypatch, parents="pb=shared") as (server, _), aiohttp.ClientSession() as client:
        async with client.get(f"{server.url}p/pb?state=rejected&q=x&scope=shared", allow_redirects=False) as answer:
            assert answer.status == 303 and answer.headers["Location"].startswith("/p/shared?")
            assert _query(answer.headers["Location"]) == {"section": "", "state": "rejected", "page": "1", "q": "x"} \
                or _query(answer.headers["Location"]) == {"state": "rejected", "page": "1", "q": "x"}
        async with client.get(f"{server.url}p/pb?scope=elsewhere") as answer:
            assert answer.status == 400 and "no scope &#x27;elsewhere&#x27; for pb: choose pb, shared" in \
                await answer.text()
        async with client.get(f"{server.url}p/pb") as page:
            assert "<select name=scope aria-label=scope>" in await page.text()
