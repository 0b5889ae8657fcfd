"""Parsing model text: fences and prose, JSON repair, per-item validation, typed errors."""

import json

import pytest

from combee_core import limits
from combee_core.llm.errors import LLMOutputError
from combee_core.llm.parsing import extract_json_text, parse_operations_output, parse_reflection_output, repair_json
from combee_core.models import AddOp, TagOp

GOOD_REFLECTION = '{"insights": [{"section": "formulas", "content": "Use SUMIFS."}], "entry_tags": []}'


def test_plain_json_needs_no_repair():
    parsed = parse_reflection_output(GOOD_REFLECTION)
    assert [i.content for i in parsed.insights] == ["Use SUMIFS."]
    assert not parsed.repaired and parsed.dropped == 0


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + GOOD_REFLECTION + "\n```",
        "Sure! Here it is:\n```\n" + GOOD_REFLECTION + "\n```\nHope this helps.",
        "The answer is " + GOOD_REFLECTION + " -- done.",
    ],
)
def test_fences_and_prose_are_stripped(text):
    parsed = parse_reflection_output(text)
    assert parsed.insights[0].section == "formulas"


@pytest.mark.parametrize(
    "broken, expected",
    [
        ('{"a": [1, 2, ], }', {"a": [1, 2]}),
        ("{'a': 'it\\'s', 'b': \"x\"}", {"a": "it's", "b": "x"}),
        ("{'a': 'say \"hi\"'}", {"a": 'say "hi"'}),
        ('{"a": True, "b": None, "c": False}', {"a": True, "b": None, "c": False}),
        ('{a: 1, b_c: "x"}', {"a": 1, "b_c": "x"}),
        ('{"a": "line one\nline two"}', {"a": "line one\nline two"}),
        ('{"a": [{"x": 1}, {"x": 2}', {"a": [{"x": 1}, {"x": 2}]}),
        ('{"a": [{"x": 1}, {"x": 2}, {"x": ', {"a": [{"x": 1}, {"x": 2}]}),
        ('{"a": 1}} trailing', {"a": 1}),
    ],
)
def test_repair_json(broken, expected):
    assert json.loads(repair_json(broken)) == expected


def test_truncated_string_is_not_kept_as_a_whole_insight():
    text = '{"insights": [{"section": "a", "content": "complete"}, {"section": "b", "content": "half writ'
    parsed = parse_reflection_output(text)
    assert [i.content for i in parsed.insights] == ["complete"]
    assert parsed.repaired


def test_extract_json_text_prefers_the_fence():
    assert extract_json_text('use {braces} wisely\n```json\n{"x": 1}\n```').startswith('{"x": 1}')


def test_invalid_items_are_dropped_and_counted():
    text = json.dumps(
        {
            "insights": [
                {"section": "Formulas", "content": "ok"},  # section is normalised to lower case
                {"section": "formulas", "content": ""},  # empty content
                {"section": "formulas", "content": "x" * (limits.MAX_INSIGHT_CHARS + 1)},  # too long: dropped
                "not an object",
            ],
            "entry_tags": [{"entry_id": "for-00001", "tag": "Helpful"}, {"entry_id": "for-00002", "tag": "great"}],
        }
    )
    parsed = parse_reflection_output(text)
    assert [(i.section, i.content) for i in parsed.insights] == [("formulas", "ok")]
    assert [(t.entry_id, t.tag) for t in parsed.entry_tags] == [("for-00001", "helpful")]
    assert parsed.dropped == 4
    assert len(parsed.problems) == 4


def test_insights_over_the_limit_are_dropped_and_counted():
    insights = [{"section": "s", "content": f"Sum column {i} with SUMIFS when there are two criteria."}
                for i in range(limits.MAX_INSIGHTS_PER_REFLECTION + 3)]
    parsed = parse_reflection_output(json.dumps({"insights": insights}))
    assert len(parsed.insights) == limits.MAX_INSIGHTS_PER_REFLECTION
    assert parsed.dropped == 3


def test_empty_reflection_is_valid():
    parsed = parse_reflection_output('{"insights": [], "entry_tags": []}')
    assert parsed.insights == [] and parsed.entry_tags == []


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("I cannot do that.", "no JSON"),
        ('["a", "b"]', "expected a JSON object"),
        ('{"lessons": []}', "neither"),
        ('{"insights": [{"section": "!!", "content": ""}]}', "no valid item"),
    ],
)
def test_unusable_reflection_raises_typed_error(text, reason):
    with pytest.raises(LLMOutputError) as caught:
        parse_reflection_output(text, model="m1")
    error = caught.value
    assert error.role == "reflector" and error.model == "m1"
    assert reason in error.reason
    assert error.raw_preview == text[:500]


def test_operations_parse_all_kinds_and_normalise_names():
    text = json.dumps(
        {
            "operations": [
                {"op": "add", "section": "Formulas", "content": "Use SUMIFS.", "support": 3},
                {"op": "UPDATE", "entry_id": "for-00001", "content": "new"},
                {"op": "MERGE", "entry_ids": ["for-00001", "for-00002"], "content": "merged"},
                {"op": "DELETE", "entry_id": "for-00003"},
                {"op": "TAG", "entry_id": "for-00004", "tag": "harmful", "count": 2},
                {"op": "MERGE", "entry_ids": ["only-one"], "content": "bad"},
                {"op": "EXPLODE"},
            ]
        }
    )
    parsed = parse_operations_output(text, role="reducer")
    assert [o.op for o in parsed.operations] == ["ADD", "UPDATE", "MERGE", "DELETE", "TAG"]
    assert parsed.operations[0] == AddOp(section="formulas", content="Use SUMIFS.", support=3)
    assert parsed.operations[4] == TagOp(entry_id="for-00004", tag="harmful", count=2)
    assert parsed.dropped == 2


def test_empty_operations_are_valid_but_missing_or_all_invalid_are_not():
    assert parse_operations_output('{"operations": []}').operations == []
    with pytest.raises(LLMOutputError, match="no 'operations'"):
        parse_operations_output('{"ops": []}', role="aggregator")
    with pytest.raises(LLMOutputError, match="no valid operation"):
        parse_operations_output('{"operations": [{"op": "ADD"}]}', role="aggregator")
    with pytest.raises(LLMOutputError, match="not a list"):
        parse_operations_output('{"operations": "ADD everything"}', role="aggregator")


def test_error_preview_is_bounded():
    text = "no json " * 500
    with pytest.raises(LLMOutputError) as caught:
        parse_operations_output(text, role="aggregator", model="m")
    assert len(caught.value.raw_preview) < 600
    assert "more chars" in caught.value.raw_preview
    assert "aggregator" in str(caught.value)


# Shapes of SmolLM2-135M's answers to the real prompts (tests/integration/test_real_llm.py): it echoes the DATA block,
# or the answer template, before (sometimes instead of) answering.


def test_an_echoed_input_before_the_answer_is_skipped():
    echo = '<<<DATA\n{"playbook":"","task":"reflect","trace":{"feedback":"Correct.","metadata":{\n "family":"R09"}}}\n'
    parsed = parse_reflection_output(echo + "DATA>>>\nAnswer:\n" + GOOD_REFLECTION)
    assert [i.content for i in parsed.insights] == ["Use SUMIFS."] and parsed.repaired


def test_a_wrapped_answer_is_unwrapped():
    parsed = parse_operations_output('{"answer": {"operations": [{"op": "DELETE", "entry_id": "for-00003"}]}}')
    assert [o.op for o in parsed.operations] == ["DELETE"] and parsed.repaired


def test_an_echoed_reducer_input_is_not_taken_for_the_answer():
    # The items of an echoed input hold "operations"; taking one of them would keep partial 1 and lose the rest.
    echo = ('{"task": "reduce", "context": "", '
            '"items": [{"item": 1, "operations": [{"op": "DELETE", "entry_id": "a"}]}]}')
    with pytest.raises(LLMOutputError, match="no 'operations'"):
        parse_operations_output(echo + "\nI merged them.", role="reducer")


def test_a_truncated_answer_after_an_echo_keeps_its_complete_items():
    echo = '{"task": "reflect", "trace": {"trace_id": "t1", "steps": []}}\n'
    answer = '{"insights": [{"section": "dates", "content": "Check the time zone."}, {"section": "da'
    parsed = parse_reflection_output(echo + answer)
    assert [i.content for i in parsed.insights] == ["Check the time zone."]


def test_an_echo_with_no_answer_is_still_an_output_error():
    echo = '<<<DATA\n{"playbook":"","task":"reflect","trace":{"feedback":"Correct.","steps":[]}}\n```'
    with pytest.raises(LLMOutputError, match="neither 'insights' nor 'entry_tags'"):
        parse_reflection_output(echo)


def test_a_support_or_count_below_one_counts_as_one():
    # SmolLM2-135M under llama.cpp's schema grammar writes "support": 0 (the grammar does not enforce minimum).
    text = ('{"operations": [{"op": "ADD", "section": "dates", "content": "Check the zone.", "support": 0},'
            ' {"op": "TAG", "entry_id": "e-1", "tag": "helpful", "count": -2}]}')
    parsed = parse_operations_output(text)
    assert parsed.operations == [AddOp(section="dates", content="Check the zone.", support=1),
                                 TagOp(entry_id="e-1", tag="helpful", count=1)]
    assert parsed.dropped == 0
