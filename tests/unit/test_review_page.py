"""The review page's HTML and form reading, without a broker."""

from __future__ import annotations

import pytest
from multidict import MultiDict, MultiDictProxy

from combee_core.serve.review import ReviewInputError, review_state
from streams.review.log import ReviewSnapshot
from streams.review.page import playbook_page
from streams.review.server import _chosen, check_bind, is_loopback
from tests.unit.test_review import V1, V2, decide, entry, version

HOSTILE = version(1, [entry("e1", "<script>alert(1)</script> & 'quotes'", 1), entry("e2", "Round last.", 1)])


def snapshot(v, decisions) -> ReviewSnapshot:
    return ReviewSnapshot(playbook_id="pb", versions=[v], promotions=[], decisions=decisions, served=v, previous=None,
                          state=review_state("pb", [v], v, decisions))


def test_entry_text_is_escaped_and_the_form_names_the_version_it_shows():
    html = playbook_page(snapshot(HOSTILE, []), review_mode=True, reviewer="ana@host", csrf="tok")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#x27;quotes&#x27;" in html
    assert "name=csrf value='tok'" in html and "name=version value='1'" in html
    assert "id=inbox-count>2<" in html and "id=approved-count>0<" in html


def test_the_page_shows_served_entries_edits_and_the_rejection_rate():
    decisions = [decide(V1, "approve", "e1"), decide(V1, "edit", "e2", content="Round only at the end."),
                 decide(V1, "reject", "e1", note="no", minute=1)]
    html = playbook_page(snapshot(V1, decisions), review_mode=True, reviewer="ana@host", csrf="tok")
    assert "edited by ana@host" in html and "Round only at the end." in html
    assert "id=rejection-rate>50%<" in html and "id=approved-count>1<" in html
    assert "review mode <b>on" in html
    changed = snapshot(V2, [])
    assert "id=inbox-count>3<" in playbook_page(changed, review_mode=False, reviewer="a", csrf="t")


def form(*pairs: tuple[str, str]) -> MultiDictProxy:
    return MultiDictProxy(MultiDict(pairs))


def test_the_form_is_read_as_one_entrys_decision_or_a_bulk_one():
    assert _chosen(form(("one", "reject:e2"), ("note:e2", "vague"), ("entry", "e1"))) == ("reject", ["e2"], "vague",
                                                                                          None)
    assert _chosen(form(("one", "edit:e1"), ("content:e1", "New."))) == ("edit", ["e1"], "", "New.")
    assert _chosen(form(("bulk", "approve"), ("entry", "e1"), ("entry", "e3"))) == ("approve", ["e1", "e3"], "",
                                                                                     None)
    with pytest.raises(ReviewInputError, match="tick at least one"):
        _chosen(form(("bulk", "approve")))


def test_the_page_binds_beyond_loopback_only_with_a_token():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    check_bind("0.0.0.0", "tok")
    with pytest.raises(ValueError, match="COMBEE_UI_TOKEN"):
        check_bind("0.0.0.0", None)


def test_a_form_without_a_decision_says_which_buttons_make_one():
    with pytest.raises(ReviewInputError, match="^the form names no decision: press Approve, Reject or Save edit$"):
        _chosen(form(("entry", "e1")))


def reflection(i: int, text: str):
    from combee_core.models import Insight, Reflection

    return Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, model="m",
                      insights=[Insight(section="general", content=text)])


def test_provenance_shows_only_reflections_above_the_likeness_floor_and_says_the_floor():
    from combee_core.serve.review_context import LIKENESS_FLOOR, closest_reflections
    from streams.review.page import entry_page

    close = reflection(1, "Check units first before any sum.")
    far = reflection(2, "Greet the user warmly in their language.")
    near = closest_reflections("Check units first.", [far, close])
    assert [n.reflection.reflection_id for n in near] == ["r1"] and near[0].score >= LIKENESS_FLOOR
    assert closest_reflections("Check units first.", [far], floor=0.0)[0].score < LIKENESS_FLOOR  # it was listed
    html = entry_page(snapshot(V1, []), "e1", [], near, [], None)
    assert "at likeness 0.30 or more" in html and "Greet the user" not in html and "Check units first before" in html
    none = entry_page(snapshot(V1, []), "e1", [], closest_reflections("Check units first.", [far]), [], None)
    assert "id=reflections-none" in none and "No reflection of that version reads like this entry" in none


def test_an_empty_diff_says_no_changes():
    from dataclasses import replace

    same = replace(snapshot(V1, []), previous=V1)
    assert "id=diff-empty>No changes.<" in playbook_page(same, review_mode=True, reviewer="a", csrf="t")
    assert "id=diff-empty" not in playbook_page(snapshot(V1, []), review_mode=True, reviewer="a", csrf="t")


def test_each_inbox_row_shows_its_support_tags_and_outcome_credit():
    from combee_core.models import AddOp, AppliedOperation, OutcomeTally

    added = AppliedOperation(operation=AddOp(section="general", content="Check units first.", support=3),
                             outcome="applied", entry_id="e1")
    counted = V1.entries[0].model_copy(update={"helpful": 4, "harmful": 1, "outcome": OutcomeTally(successes=6,
                                                                                                   failures=2)})
    v = V1.model_copy(update={"operations": [added], "entries": [counted, V1.entries[1]]})
    html = playbook_page(snapshot(v, []), review_mode=True, reviewer="a", csrf="t")
    row = html[html.index("id='evidence-e1'"):]
    assert row.index("support 3") < row.index("helpful 4 · harmful 1") < row.index("outcome +") < row.index("</td>")
    other = html[html.index("id='evidence-e2'"):]
    assert other.index("support not recorded") < other.index("outcome unused") < other.index("</td>")
