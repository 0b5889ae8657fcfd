"""The reflector's decisions, driven without a broker or an LLM (``combee_core.reflect.processor``)."""

from __future__ import annotations

import asyncio

from combee_core.llm.errors import LLMOutputError
from combee_core.models import Reflection, Trace
from combee_core.processors.effects import Count, Publish, Reject
from combee_core.reflect.processor import reflect_all
from tests.integration.topology_support import make_traces


async def test_a_fetch_is_reflected_on_concurrently_and_answered_in_input_order_a_failure_is_a_dead_letter():
    traces = make_traces(3)
    started: list[str] = []
    all_started = asyncio.Event()

    async def role(trace: Trace, used: str | None) -> Reflection:
        started.append(trace.trace_id)
        if len(started) == len(traces):
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 5)  # only returns if every call is in flight at once
        if trace is traces[1]:
            raise LLMOutputError("reflector", "sim", "no JSON in the answer")
        return Reflection(reflection_id=f"r-{trace.trace_id}", trace_id=trace.trace_id, playbook_id=trace.playbook_id,
                          seen_version=trace.playbook_version, insights=[], model="sim", trace_digest=used)

    async def used_entries(trace: Trace) -> str | None:
        return f"entries of {trace.trace_id}"

    answered = await reflect_all([(trace, f"k{n}") for n, trace in enumerate(traces)], role, used_entries)
    assert [token for token, _ in answered] == ["k0", "k1", "k2"]
    first, failed, last = (effects for _, effects in answered)
    assert isinstance(first[0], Publish) and first[0].topic == "reflections" and first[1] == Count("reflections")
    assert first[0].value.trace_digest == f"entries of {traces[0].trace_id}"  # type: ignore[attr-defined]
    [rejected] = failed
    assert isinstance(rejected, Reject) and rejected.token == "k1" and rejected.error_type == "LLMOutputError"
    assert rejected.reason.startswith("reflection failed: reflector call") and rejected.trace_id == traces[1].trace_id
    assert isinstance(last[0], Publish) and last[0].key == traces[2].playbook_id
