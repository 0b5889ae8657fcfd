"""The review inbox as people work through it: free-text reviewer names, plain-language errors, the page's parts."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from combee_core import limits
from combee_core.models import ReviewDecision
from combee_core.serve.review import ReviewInputError, make_decision
from tests.unit.test_review import T0, V1, decide


def test_a_reviewer_name_is_free_text_as_people_write_it():
    for name in ("Jane Doe", "José Ñúñez-O'Brien", "ana@host", "李 小龙"):
        decision = decide(V1, "approve", "e1", reviewer=name)
        assert ReviewDecision.from_json_bytes(decision.to_json_bytes()).reviewer == name


@pytest.mark.parametrize("name", ["Jane\nDoe", "bell\x07", "rtl\u202eevil", "zero\u200bwidth", " Jane", "Jane ", "",
                                  "x" * (limits.MAX_ID_CHARS + 1), "line\u2028sep", "c1\x85"])
def test_a_reviewer_name_with_control_or_invisible_characters_or_too_long_is_refused(name):
    with pytest.raises(ValidationError):
        decide(V1, "approve", "e1", reviewer=name)


@given(st.text(min_size=1, max_size=limits.MAX_ID_CHARS))
def test_every_accepted_reviewer_name_is_one_printable_line(name):
    try:
        decision = decide(V1, "approve", "e1", reviewer=name)
    except ValidationError:
        return
    assert decision.reviewer == name == name.strip()
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in name)


def test_a_rejection_without_a_note_answers_one_plain_sentence():
    with pytest.raises(ReviewInputError) as caught:
        make_decision(V1, "reject", ["e1"], reviewer="ana@host", decided_at=T0, note="  ")
    assert str(caught.value) == "a rejection needs a note saying why: write it in the note field"


@pytest.mark.parametrize(("fields", "said"), [
    ({"reviewer": "Jane\x07"}, "cannot approve: the reviewer's name may not hold control or invisible characters "
                               "(found U+0007)"),
    ({"reviewer": "x" * 200}, "cannot approve: the reviewer's name is longer than 128 characters"),
    ({"note": "n" * 2001}, "cannot approve: the note is longer than 2000 characters"),
])
def test_form_errors_are_plain_sentences_not_validation_jargon(fields, said):
    arguments = {"reviewer": "ana@host", "decided_at": T0} | fields
    with pytest.raises(ReviewInputError) as caught:
        make_decision(V1, "approve", ["e1"], **arguments)
    message = str(caught.value)
    assert message == said
    assert "Value error" not in message and "String should" not in message and "\n" not in message


def test_combee_ui_and_combee_serve_default_to_different_ports():
    from combee_core.settings import CombeeSettings

    ports = [CombeeSettings.model_fields[name].default for name in ("ui_port", "serve_port", "serve_mcp_port")]
    assert len(set(ports)) == 3, ports
