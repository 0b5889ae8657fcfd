"""Recorded LLM calls: the JSONL store, and replay that answers from the record and fails loudly on a miss."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMCallError, LLMError
from combee_core.llm.record import (
    CallIndex,
    CallStore,
    CallStoreError,
    LLMRecordMiss,
    ReplayResponder,
    parse_call_lines,
)
from combee_core.llm.roles import LLMRoles
from combee_core.llm.simulator import SimulatorConfig, format_lesson
from combee_core.models import CallRecord, Trace

FAST = RoleConfig(backoff_s=0.001, max_retries=1)


def config(seed: int = 0) -> LLMConfig:
    return LLMConfig(reflector=FAST, aggregator=FAST, reducer=FAST,
                     simulator=SimulatorConfig(seed=seed, mode="virtual"))


def trace(i: int) -> Trace:
    return Trace(
        trace_id=f"trace-{i}", playbook_id="pb", playbook_version=0, agent_id="agent", task_id=f"task-{i}",
        input=f"Sum the sales of region {i}.", output="42",
        feedback=format_lesson("formulas", f"Specific lesson {i}."), success=False,
        created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


async def record_calls(seed: int = 0) -> tuple[list[CallRecord], list]:
    records: list[CallRecord] = []
    roles = LLMRoles(config(seed), on_call=records.append)
    reflections = [await roles.reflect(trace(i)) for i in range(3)]
    result = await roles.aggregate(reflections)
    return records, [*reflections, result.operations]


async def test_replay_reproduces_the_recorded_answers_without_the_model():
    records, outputs = await record_calls()
    responder = ReplayResponder(CallIndex(records))
    replayed: list[CallRecord] = []
    roles = LLMRoles(config(), on_call=replayed.append, responder=responder)
    assert roles._litellm is None  # the model is never set up
    reflections = [await roles.reflect(trace(i)) for i in range(3)]
    result = await roles.aggregate(reflections)
    assert [*reflections, result.operations] == outputs
    assert [(r.key, r.response_text, r.usage) for r in replayed] == [(r.key, r.response_text, r.usage) for r in records]
    assert responder.answered == len(records)


async def test_a_miss_is_a_typed_error_naming_the_call_and_no_fallback():
    records, _ = await record_calls(seed=0)
    told: list[LLMRecordMiss] = []
    responder = ReplayResponder(CallIndex(records), on_miss=told.append)
    roles = LLMRoles(config(seed=1), responder=responder)  # another seed -> other simulator params -> other keys
    with pytest.raises(LLMRecordMiss) as caught:
        await roles.reflect(trace(0))
    miss = caught.value
    assert not isinstance(miss, LLMError)  # stages must not dead-letter it
    assert miss.role == "reflector" and miss.model == "combee-sim/default"
    message = str(miss)
    assert miss.key[:16] in message and "reflector" in message and "combee-sim/default" in message
    assert "Sum the sales of region 0." in miss.prompt_start or "Sum" in message
    assert told == [miss] and responder.misses == [miss]


async def test_a_recorded_failure_fails_again_then_the_recorded_retry_answers():
    records, _ = await record_calls()
    first = records[0]
    failed = first.model_copy(update={"response_text": None, "error": "LLMCallError: timeout", "attempt": 1})
    answered = first.model_copy(update={"attempt": 2})
    responder = ReplayResponder(CallIndex([failed, answered]))
    seen: list[CallRecord] = []
    roles = LLMRoles(config(), on_call=seen.append, responder=responder)
    reflection = await roles.reflect(trace(0))
    assert [r.attempt for r in seen] == [1, 2] and seen[0].error and seen[1].error is None
    assert reflection.trace_id == "trace-0"

    only_failures = ReplayResponder(CallIndex([failed, failed.model_copy(update={"attempt": 2})]))
    with pytest.raises(LLMCallError, match="recorded failure"):
        await LLMRoles(config(), responder=only_failures).reflect(trace(0))


async def test_call_store_round_trip_and_bad_line_numbers(tmp_path):
    records, _ = await record_calls()
    store = CallStore(tmp_path / "calls" / "run.jsonl")
    for record in records:
        store.append(record)
    assert store.load() == records

    lines = store.path.read_bytes().splitlines()
    lines[1] = lines[1][:40]
    with pytest.raises(CallStoreError, match=r":2: invalid JSON") as caught:
        parse_call_lines(lines, "run.jsonl")
    assert caught.value.line == 2
    with pytest.raises(CallStoreError, match=r":1: not a call record: role"):
        parse_call_lines([b'{"role": "poet"}'], "x.jsonl")
    with pytest.raises(CallStoreError, match="no such call store"):
        CallStore(tmp_path / "missing.jsonl").load()


async def test_record_mode_appends_every_call_to_the_file_and_replay_reads_it(tmp_path):
    from combee_core.settings import CombeeSettings
    from streams.topology.llm_setup import build_llm_roles, replay_responder

    path = tmp_path / "calls.jsonl"
    settings = CombeeSettings.load(env={}, llm_record="record", llm_record_file=str(path), sim_clock="virtual")
    roles = build_llm_roles(settings)
    reflection = await roles.reflect(trace(5))
    stored = CallStore(path).load()
    assert [r.role for r in stored] == ["reflector"] and stored[0].error is None

    replaying = settings.model_copy(update={"llm_record": "replay"})
    responder = await replay_responder(replaying, "unused:9092", None)  # a file: no broker is read
    again = await build_llm_roles(replaying, responder=responder).reflect(trace(5))
    assert again == reflection and responder.answered == 1
