"""Undo of a review decision: the wire record, the fold (as if the decision had never been made), the refusals and
byte-identical replay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from combee_core.models import ReviewDecision
from combee_core.serve.review import ReviewInputError, describe_review, load_book, review_state
from combee_core.serve.review_undo import find_decision, make_undo, undoable
from tests.unit.test_review import T0, V1, V2, decide, review_logs, served


def undo(log: list[ReviewDecision], given: str, minute: int = 30, note: str = "") -> ReviewDecision:
    return make_undo("pb", log, given, reviewer="Jane Doe", decided_at=T0 + timedelta(minutes=minute), note=note)


def test_an_undo_takes_the_decision_out_and_its_proposals_fall_back_to_the_one_before():
    approve = decide(V2, "approve", "e2", "e3")
    reject = decide(V2, "reject", "e3", note="wrong order", minute=1)
    assert served([approve, reject]) == {"e2": "Round at the end."}
    log = [approve, reject, undo([approve, reject], reject.decision_id[:12])]
    assert served(log) == {"e2": "Round at the end.", "e3": "Sort dates ascending."}  # back to the approval
    log.append(undo(log, approve.decision_id, minute=31))
    assert served(log) == {}  # nothing decided any more: withheld, as before any decision
    state = review_state("pb", [V1, V2], V2, log)
    assert state.undone == [reject.decision_id, approve.decision_id]
    assert {row.status for row in state.proposals if row.current} == {"proposed"}
    assert state.rejection_rate is None


def test_an_undone_edit_stops_serving_the_reviewers_text():
    edit = decide(V2, "edit", "e2", content="Round only the final answer.")
    log = [decide(V2, "approve", "e2"), edit]
    assert served(log)["e2"] == "Round only the final answer."
    assert served([*log, undo(log, edit.decision_id)])["e2"] == "Round at the end."


def test_the_undo_record_names_the_decision_and_its_items_and_who_took_it_back():
    approve = decide(V2, "approve", "e2", "e3")
    record = undo([approve], approve.decision_id[:8], note="clicked the wrong row")
    assert (record.action, record.undoes, record.reviewer) == ("undo", approve.decision_id, "Jane Doe")
    assert record.items == approve.items and record.note == "clicked the wrong row"
    assert ReviewDecision.from_json_bytes(record.to_json_bytes()) == record
    assert describe_review(record).startswith(f"pb review {record.decision_id[:12]}: undo "
                                              f"{approve.decision_id[:12]} (of e2, e3) by Jane Doe")
    with pytest.raises(ValidationError, match="names the decision it takes back"):
        ReviewDecision.make(playbook_id="pb", action="undo", items=approve.items, reviewer="x", decided_at=T0)
    with pytest.raises(ValidationError, match="names the decision it takes back"):
        ReviewDecision.make(playbook_id="pb", action="approve", items=approve.items, undoes=approve.decision_id,
                            reviewer="x", decided_at=T0)


def test_a_decision_written_before_undo_existed_keeps_its_id():
    approve = decide(V1, "approve", "e1")
    old_record = approve.model_dump(mode="json")
    del old_record["undoes"]  # as records were written before the field
    assert ReviewDecision.model_validate(old_record).decision_id == approve.decision_id


def test_what_cannot_be_undone_is_refused_in_one_line():
    approve = decide(V2, "approve", "e2")
    first = undo([approve], approve.decision_id)
    log = [approve, first]
    for named, refusal in ((approve.decision_id, "^decision .{12} was already undone by Jane Doe at "),
                           (first.decision_id, "^decision .{12} is itself an undo: to restore what it took back, "
                                               "decide again$"),
                           ("0123456789", "^pb has no review decision 0123456789 "),
                           ("abc", "^'abc' is not a decision id: give at least 6 of its hex digits"),
                           ("zzzzzzzz", "is not a decision id")):
        with pytest.raises(ReviewInputError, match=refusal):
            undo(log, named)
    assert undoable("pb", log) == set()
    assert find_decision("pb", log, approve.decision_id[:6].upper()) == approve


def test_an_undo_the_log_cannot_apply_changes_nothing():
    """An undo read before its decision (a hand-made record), of an undo, or resent, has no effect."""
    approve = decide(V2, "approve", "e2")
    early = undo([approve], approve.decision_id)
    assert served([early, approve]) == {"e2": "Round at the end."}
    second = ReviewDecision.make(playbook_id="pb", action="undo", items=early.items, undoes=early.decision_id,
                                 reviewer="x", decided_at=T0)
    assert served([approve, early, second]) == {}
    assert review_state("pb", [V1, V2], V2, [approve, early, early]).to_json_bytes() == \
        review_state("pb", [V1, V2], V2, [approve, early]).to_json_bytes()


@settings(max_examples=120, deadline=None)
@given(review_logs(), st.data())
def test_a_log_with_undos_folds_as_the_log_without_the_undone_decisions(log, data):
    """The invariant: undoing decisions is the same as never having made them, byte for byte."""
    v1, v2, decisions = log
    with_undos = list(decisions)
    undone: set[str] = set()
    for minute, target in enumerate(decisions):
        if data.draw(st.booleans()):
            with_undos.append(undo(with_undos, target.decision_id, minute=100 + minute))
            undone.add(target.decision_id)
    kept = [d for d in decisions if d.decision_id not in undone]
    assert undoable("pb", with_undos) == {d.decision_id for d in kept}
    folded = review_state("pb", [v1, v2], v2, with_undos)
    without = review_state("pb", [v1, v2], v2, kept)
    assert folded.view == without.view and folded.proposals == without.proposals
    assert folded.rejection_rate == without.rejection_rate
    wire = [ReviewDecision.from_json_bytes(d.to_json_bytes()) for d in with_undos]
    assert review_state("pb", [v1, v2], v2, wire).to_json_bytes() == folded.to_json_bytes()
    assert load_book(with_undos).undone.get("pb", {}).keys() == undone
