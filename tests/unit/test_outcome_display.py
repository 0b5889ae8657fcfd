"""Each entry's outcome credit and evidence, where a user reads entries: ``combee playbook export`` (Markdown; JSON
carries the counts as published), ``combee tail``'s description of a version, and the review page's entry view."""

from __future__ import annotations

from combee_core.models import AddOp, AppliedOperation, Challenge, OutcomeTally
from combee_core.serve.review import review_state
from streams.cli.playbook import render
from streams.review.log import ReviewSnapshot
from streams.review.page import entry_page
from streams.topology.observe import describe_version
from tests.unit.test_review import entry, version

BASELINE = OutcomeTally(successes=70_000, failures=30_000)
USED = entry("e1", "Check units first.", 1).model_copy(update={
    "helpful": 3, "outcome": OutcomeTally(successes=19_000, failures=1_000)})
PENDING = Challenge(entry_id="e1", entry_content="Check units first.", section="general", content="Never check units.",
                    support=2, first_version=2, last_version=2, why="polarity")
V2 = version(2, [USED, entry("e2", "Round at the end.", 1)]).model_copy(update={
    "baseline": BASELINE, "challenges": [PENDING],
    "operations": [AppliedOperation(operation=AddOp(section="general", content="Check the units first."),
                                    outcome="applied", reason="near-duplicate of e1", entry_id="e1")]})


def test_the_markdown_export_shows_each_entrys_outcome_credit_and_the_pending_corrections() -> None:
    text = render(V2, "markdown")
    assert "**e1** (helpful 3, harmful 0; outcome +0.21 ± 0.08 over 20.0 uses (baseline 0.70))" in text
    assert "**e2** (helpful 0, harmful 0; outcome unused)" in text
    assert "against **e1** (support 2 traces, v2-v2; polarity): Never check units." in text


def test_tail_shows_a_reinforced_entrys_outcome_credit() -> None:
    assert "= [e1] helpful 3, outcome +0.21 ± 0.08 over 20.0 uses" in describe_version(V2)


def test_the_review_entry_view_shows_its_outcome_credit_evidence_and_challenges() -> None:
    snapshot = ReviewSnapshot(playbook_id="pb", versions=[V2], promotions=[], decisions=[], served=V2, previous=None,
                              state=review_state("pb", [V2], V2, []))
    page = entry_page(snapshot, "e1", [], [], [], None)
    assert "outcome credit +0.21 ± 0.08 over 20.0 uses (baseline 0.70); evidence: helpful 3, harmful 0" in page
    assert "<ul id=challenges><li>Never check units. (support 2 traces since v2)</li></ul>" in page
