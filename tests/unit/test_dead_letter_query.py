"""``combee dlq``'s reading of dead letters: the filter, the line, the original bytes
(``combee_core.runs.dead_letter_query``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from combee_core.runs.dead_letter_query import DeadLetterFilter, describe_dead_letter, original_bytes, summarise
from streams.topology.dead_letters import make_dead_letter


def _letters():
    return [make_dead_letter("reflect", "invalid JSON: unexpected character", "TraceRejected", b"{not json",
                             topic="p.traces", partition=0, offset=5),
            make_dead_letter("reflect", "does not match the Trace schema v1: agent_id: Field required", "TraceRejected",
                             b'{"trace_id": "t1", "playbook_id": "pb"}', topic="p.traces", partition=1, offset=7,
                             trace_id="t1", playbook_id="pb"),
            make_dead_letter("batch", "stale: trace ran with version 1, 5 versions behind", "StaleTrace", b"{}",
                             playbook_id="pb")]


def test_filters_by_stage_error_type_reason_text_and_playbook():
    letters = _letters()
    assert [letter.stage for letter in letters if DeadLetterFilter(stage="reflect").matches(letter)] == ["reflect"] * 2
    assert sum(DeadLetterFilter(error_type="staletrace").matches(letter) for letter in letters) == 1
    assert [letter.offset for letter in letters if DeadLetterFilter(reason="INVALID json").matches(letter)] == [5]
    assert sum(DeadLetterFilter(stage="reflect", playbook_id="pb").matches(letter) for letter in letters) == 1
    assert all(DeadLetterFilter().matches(letter) for letter in letters)
    described = DeadLetterFilter(stage="reflect", reason="schema").describe()
    assert described == "stage 'reflect', reason containing 'schema'"
    assert summarise(letters) == [("reflect", "TraceRejected", 2), ("batch", "StaleTrace", 1)]


def test_a_line_names_stage_type_ids_source_and_reason():
    line = describe_dead_letter(_letters()[1], 12)
    assert line.startswith("#12 ") and " reflect TraceRejected playbook=pb trace=t1 (p.traces[1]@7, 39 bytes): " \
        "does not match the Trace schema v1" in line


@given(st.binary(max_size=300))
def test_the_original_bytes_come_back_as_they_were_sent(raw: bytes):
    assert original_bytes(make_dead_letter("reflect", "r", "TraceRejected", raw)) == raw

