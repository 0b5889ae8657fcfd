"""The role prompts: the reflector diagnoses before it writes lessons, the limits a prompt states are the answer
schema's, and everything a prompt carries is token-capped, visibly."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.llm import aggregator_role, prompts, reducer_role, reflector_role
from combee_core.llm.payload import MIN_TRACE_TOKENS, fit_lines, fit_trace
from combee_core.models import Trace, TraceStep

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def trace(**fields: object) -> Trace:
    values: dict[str, object] = dict(trace_id="t-1", playbook_id="pb", playbook_version=1, agent_id="a", task_id="x",
                                     input="What is 2+2?", output="5", feedback="Wrong.", success=False,
                                     created_at=NOW)
    values.update(fields)
    return Trace(**values)  # type: ignore[arg-type]


def test_the_reflector_diagnoses_before_it_states_lessons_in_its_own_words():
    system = reflector_role.REFLECTOR_SYSTEM
    order = [system.index(word) for word in ("what_went_wrong", "root_cause", "correct_approach", "Then state")]
    assert order == sorted(order)
    assert "your own words" in system and "keep its section and wording" not in system
    schema = prompts.answer_schema("reflect")
    assert list(schema["properties"]) == ["diagnosis", "insights", "entry_tags"]  # generated in this order
    assert set(schema["required"]) >= {"diagnosis", "insights", "entry_tags"}


def test_the_limits_each_prompt_states_are_the_answer_schemas():
    reflect = prompts.answer_schema("reflect")
    insights = reflect["properties"]["insights"]["maxItems"]
    content = reflect["$defs"]["Lesson"]["properties"]["content"]["maxLength"]
    assert f"At most {insights} insights of at most {content} characters" in reflector_role.REFLECTOR_SYSTEM
    assert f"<= {content} chars" in reflector_role.REFLECTOR_SYSTEM
    for task, system in (("aggregate", aggregator_role.AGGREGATOR_SYSTEM), ("reduce", reducer_role.REDUCER_SYSTEM)):
        schema = prompts.answer_schema(task)
        most = schema["properties"]["operations"]["maxItems"]
        merge_ids = schema["$defs"]["MergeAnswer"]["properties"]["entry_ids"]["maxItems"]
        lengths = {d["properties"]["content"]["maxLength"] for d in schema["$defs"].values()
                   if "content" in d["properties"]}
        assert f"At most {most} operations; every content at most {lengths.pop()} characters" in system
        assert not lengths and f"at most {merge_ids} ids" in system
    assert insights == prompts.ANSWER_MAX_ITEMS["insights"] and most == prompts.ANSWER_MAX_ITEMS["operations"]


def test_a_huge_trace_and_many_used_entries_are_cut_to_their_caps_visibly():
    huge = trace(input="i" * 60_000, output="o" * 60_000, feedback="LESSON[x]: keep this line.\n" + "f" * 16_000,
                 steps=[TraceStep(role="tool", content=f"step {n} " + "s" * 16_000) for n in range(200)])
    used = "\n".join(f"[gen-{n:05d}] helpful=0 harmful=0 :: lesson text {n}" for n in range(2000))
    messages = reflector_role.reflector_messages(huge, used, context_tokens=500, trace_tokens=2000)
    data = prompts.read_data_block(messages)
    assert len(orjson.dumps(data["trace"], option=orjson.OPT_SORT_KEYS)) <= 2000 * 4
    assert len(data["used_entries"]) <= 500 * 4
    assert data["used_entries"].endswith("more lines not shown: over the 500-token cap)")
    assert "chars omitted" in data["trace"]["input"] and data["trace"]["steps_omitted"] > 0
    assert data["trace"]["feedback"].startswith("LESSON[x]: keep this line.")
    assert data["trace"]["trace_id"] == "t-1" and data["trace"]["success"] is False
    small = trace()
    read = prompts.read_data_block(reflector_role.reflector_messages(small))
    assert read["trace"] == reflector_role.trace_payload(small)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=3000), min_size=1, max_size=40), st.integers(MIN_TRACE_TOKENS, 6000),
       st.integers(0, 64))
def test_property_a_trace_payload_and_context_lines_never_exceed_their_caps(texts, cap, keys):
    payload = {"trace_id": "t" * 128, "task_id": "x" * 128, "success": True, "score": 1.0, "input": texts[0],
               "output": texts[-1], "feedback": "".join(texts[:3]), "steps": [{"content": t} for t in texts],
               "metadata": {f"key{i:03d}" + "k" * 120: (texts[i % len(texts)] * 3)[:2048] for i in range(keys)}}
    assert len(orjson.dumps(fit_trace(payload, cap), option=orjson.OPT_SORT_KEYS)) <= cap * 4
    assert len(fit_lines("\n".join(texts), cap // 10)) <= (cap // 10) * 4


async def test_a_reflection_tags_only_the_entries_its_agent_used():
    from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles

    async def answer(request: LLMRequest) -> LLMReply:
        return LLMReply(text=orjson.dumps({"insights": [], "entry_tags": [
            {"entry_id": "gen-00001", "tag": "helpful"}, {"entry_id": "gen-00009", "tag": "harmful"}]}).decode())

    roles = LLMRoles(responder=answer)
    used = await roles.reflect(trace(metadata={"used_entries": "gen-00001, gen-00002"}))
    assert [(t.entry_id, t.tag) for t in used.entry_tags] == [("gen-00001", "helpful")]
    assert (await roles.reflect(trace())).entry_tags == []  # an agent that reports no entries vouches for none


async def test_items_over_the_payload_cap_are_not_sent_and_the_call_fails_with_the_reason():
    import pytest

    from combee_core.llm.config import LLMConfig
    from combee_core.llm.errors import PromptTooLarge
    from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles
    from combee_core.models import AddOp

    calls: list[LLMRequest] = []

    async def answer(request: LLMRequest) -> LLMReply:
        calls.append(request)
        return LLMReply(text='{"operations": []}')

    roles = LLMRoles(LLMConfig(payload_tokens=50), responder=answer)
    small = [[AddOp(section="general", content="Carry the tens.")]]
    assert (await roles.reduce(small)).operations == [] and len(calls) == 1
    with pytest.raises(PromptTooLarge, match="over the 50-token payload cap"):
        await roles.reduce([[AddOp(section="general", content=f"Lesson {n} " * 20)] for n in range(4)])
    assert len(calls) == 1
