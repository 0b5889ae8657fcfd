"""The three roles with the offline combee-sim model (answered in-process; through litellm's combee-sim provider
where a test says so): round trips, records, retries, latency."""

import asyncio
import logging
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMCallError, LLMOutputError
from combee_core.llm.reflector_role import reflection_id_for
from combee_core.llm.roles import LLMReply, LLMRoles, call_key
from combee_core.llm.simulator import INPUT_COST_PER_TOKEN, OUTPUT_COST_PER_TOKEN, SimulatorConfig, format_lesson
from combee_core.models import AddOp, CallRecord, TagOp, Trace, Usage
from combee_core.settings import CombeeSettings

FAST = RoleConfig(backoff_s=0.001)


def config(**sim) -> LLMConfig:
    return LLMConfig(reflector=FAST, aggregator=FAST, reducer=FAST, simulator=SimulatorConfig(**sim))


def specific_lesson(i: int) -> str:
    """Trace ``i``'s own task lesson: a real one, since a placeholder such as "Specific lesson 1." reads as no task
    lesson to the learned injection check (``combee_core.llm.system_classifier``) that parsing asks by default."""
    return f"Use SUMIFS on sales column {i} when there are two criteria."


def make_trace(i: int, success: bool = False) -> Trace:
    feedback = "\n".join(
        [
            "The total is wrong.",
            format_lesson("formulas", specific_lesson(i)),
            format_lesson("general", "Check the units first.", generic=True),
        ]
    )
    return Trace(
        trace_id=f"trace-{i}",
        playbook_id="pb",
        playbook_version=3,
        agent_id="agent",
        task_id=f"task-{i}",
        input="Sum the sales.",
        output="42",
        feedback=feedback,
        success=success,
        metadata={"used_entries": "for-00001"},
        created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


async def test_reflect_round_trip_records_usage_cost_and_modelled_latency():
    records: list[CallRecord] = []
    roles = LLMRoles(config(), on_call=records.append)
    reflection = await roles.reflect(make_trace(1), playbook_text="## formulas\n- [for-00001] Use SUM.")
    assert reflection.reflection_id == reflection_id_for("trace-1") == reflection_id_for("trace-1")
    assert reflection.reflection_id.startswith("r-") and len(reflection.reflection_id) == 18
    assert (reflection.trace_id, reflection.playbook_id, reflection.seen_version) == ("trace-1", "pb", 3)
    assert [(i.section, i.content) for i in reflection.insights] == [
        ("formulas", specific_lesson(1)),
        ("general", "Check the units first."),
    ]
    assert [(t.entry_id, t.tag) for t in reflection.entry_tags] == [("for-00001", "harmful")]
    assert reflection.model == "combee-sim/default"

    (record,) = records
    usage = reflection.usage
    assert usage == record.usage and usage.calls == 1 and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    expected_cost = usage.prompt_tokens * INPUT_COST_PER_TOKEN + usage.completion_tokens * OUTPUT_COST_PER_TOKEN
    assert usage.cost_usd == pytest.approx(expected_cost) and usage.cost_usd > 0
    expected_latency = 0.4 + usage.prompt_tokens * 0.0002 + usage.completion_tokens * 0.02
    assert reflection.latency_s == pytest.approx(expected_latency) == record.modelled_latency_s
    assert record.role == "reflector" and record.items_read == 1 and record.attempt == 1 and record.error is None
    assert record.key == call_key(record.model, record.messages, record.params)
    assert "Use SUM." in record.messages[-1]["content"]


async def test_aggregate_and_reduce_round_trip():
    records: list[CallRecord] = []

    async def on_call(record: CallRecord) -> None:  # async callbacks are awaited
        records.append(record)

    roles = LLMRoles(config(), on_call=on_call)
    reflections = await asyncio.gather(*(roles.reflect(make_trace(i, success=i % 2 == 0)) for i in range(4)))
    first = await roles.aggregate(reflections[:2] + reflections[:2])
    second = await roles.aggregate(reflections[2:])
    assert AddOp(section="general", content="Check the units first.", support=4) in first.operations
    assert TagOp(entry_id="for-00001", tag="harmful", count=2) in first.operations  # odd ids failed; 2 copies of 1
    assert first.usage.calls == 1 and first.usage.cost_usd > 0 and first.latency_s > 0.4

    merged = await roles.reduce([first.operations, second.operations])
    adds = {op.content: op.support for op in merged.operations if op.op == "ADD"}
    assert adds == {
        "Check the units first.": 6,
        specific_lesson(0): 2,
        specific_lesson(1): 2,
        specific_lesson(2): 1,
        specific_lesson(3): 1,
    }
    assert TagOp(entry_id="for-00001", tag="helpful", count=3) in merged.operations
    assert TagOp(entry_id="for-00001", tag="harmful", count=3) in merged.operations
    assert [r.items_read for r in records[-3:]] == [4, 2, 2]
    assert [r.role for r in records[-3:]] == ["aggregator", "aggregator", "reducer"]


async def test_nothing_to_aggregate_makes_no_call():
    records: list[CallRecord] = []
    result = await LLMRoles(config(), on_call=records.append).aggregate([])
    assert result.operations == [] and result.usage == Usage() and records == []


async def test_same_inputs_same_outputs_and_keys():
    async def one() -> tuple:
        records: list[CallRecord] = []
        roles = LLMRoles(config(seed=5), on_call=records.append)
        reflections = [await roles.reflect(make_trace(i)) for i in range(30)]
        result = await roles.aggregate(reflections)
        return [r.key for r in records], reflections, result.operations, [r.response_text for r in records]

    first, second = await one(), await one()
    assert first == second
    specific = [op for op in first[2] if op.op == "ADD" and op.content.startswith("Use SUMIFS on sales column")]
    assert len(specific) < 30  # 30 items > C = 12: some specific lessons are lost


async def test_virtual_mode_does_not_sleep_and_real_mode_does():
    virtual = LLMRoles(config(mode="virtual", time_scale=1.0))
    started = time.perf_counter()
    reflection = await virtual.reflect(make_trace(1))
    assert time.perf_counter() - started < 0.4 < reflection.latency_s

    records: list[CallRecord] = []
    real = LLMRoles(config(mode="real", time_scale=0.05), on_call=records.append)
    started = time.perf_counter()
    reflection = await real.reflect(make_trace(1))
    wall = time.perf_counter() - started
    (record,) = records
    assert record.modelled_latency_s is not None and record.modelled_latency_s > 0.02
    assert wall >= record.modelled_latency_s
    assert record.modelled_latency_s <= reflection.latency_s <= wall  # real mode records wall time


async def test_retry_after_injected_failures_then_success():
    records: list[CallRecord] = []
    roles = LLMRoles(config(fail_first_n=2), on_call=records.append)
    reflection = await roles.reflect(make_trace(1))
    assert [r.attempt for r in records] == [1, 2, 3]
    assert [r.error is not None for r in records] == [True, True, False]
    assert "injected" in records[0].error
    assert len({r.key for r in records}) == 1  # the attempt number is not part of the call key
    assert reflection.usage.calls == 1 and reflection.insights


async def test_call_error_after_retries():
    records: list[CallRecord] = []
    roles = LLMRoles(config(fail_first_n=3), on_call=records.append)
    with pytest.raises(LLMCallError) as caught:
        await roles.aggregate([await LLMRoles(config()).reflect(make_trace(1))])
    assert caught.value.attempts == 3 and caught.value.role == "aggregator"
    assert len(records) == 3 and all(r.error for r in records)


async def test_unparseable_output_is_re_asked():
    records: list[CallRecord] = []
    roles = LLMRoles(config(malformed_first_n=1), on_call=records.append)
    reflection = await roles.reflect(make_trace(1))
    assert reflection.insights
    assert records[0].error.startswith("LLMOutputError") and records[0].response_text
    assert reflection.usage.calls == 2  # the unparseable answer was paid for too


async def test_persistently_malformed_output_raises_output_error():
    roles = LLMRoles(config(malformed_first_n=100))
    with pytest.raises(LLMOutputError) as caught:
        await roles.reflect(make_trace(1))
    error = caught.value
    assert error.attempts == 3 and error.role == "reflector" and error.model == "combee-sim/default"
    assert "sorry" in error.raw_preview


async def test_messy_output_is_repaired():
    records: list[CallRecord] = []
    roles = LLMRoles(config(output_style="messy"), on_call=records.append)
    reflection = await roles.reflect(make_trace(1))
    assert len(reflection.insights) == 2
    assert records[0].repaired and records[0].response_text.startswith("Here is")


async def test_timeout_is_retried_then_reported():
    slow = RoleConfig(timeout_s=0.1, max_retries=1, backoff_s=0.001)
    roles = LLMRoles(LLMConfig(reflector=slow))
    with pytest.raises(LLMCallError, match="Timeout") as caught:
        await roles.reflect(make_trace(1))
    assert caught.value.attempts == 2


async def test_each_call_is_priced_once_by_the_provider_not_again_by_litellm_or_the_roles(monkeypatch):
    import litellm

    def no_repricing(*args, **kwargs):
        raise AssertionError("priced again")

    monkeypatch.setattr(litellm, "completion_cost", no_repricing)
    monkeypatch.setattr(litellm, "response_cost_calculator", no_repricing)
    records: list[CallRecord] = []
    reflection = await LLMRoles(config(), on_call=records.append, sim_through_litellm=True).reflect(make_trace(1))
    usage = reflection.usage
    assert usage.prompt_tokens > 0
    price = usage.prompt_tokens * INPUT_COST_PER_TOKEN + usage.completion_tokens * OUTPUT_COST_PER_TOKEN
    assert usage.cost_usd == round(price, 12) and records[0].usage.cost_usd == usage.cost_usd


async def test_a_response_without_a_price_costs_zero_with_one_warning(monkeypatch, caplog):
    import litellm

    from combee_core.llm import provider

    def broken(*args, **kwargs):
        raise litellm.exceptions.NotFoundError("no price", model="m", llm_provider="x")

    monkeypatch.setattr(provider, "sim_cost", lambda *tokens: None)  # the provider names no price...
    monkeypatch.setattr(litellm, "response_cost_calculator", broken)  # ...and litellm cannot find one
    roles = LLMRoles(config(), sim_through_litellm=True)
    with caplog.at_level(logging.WARNING, logger="combee_core.llm.roles"):
        reflections = [await roles.reflect(make_trace(i)) for i in range(2)]
    assert all(r.usage.cost_usd == 0.0 and r.usage.prompt_tokens > 0 for r in reflections)
    assert sum("no cost for model" in r.getMessage() for r in caplog.records) == 1


async def test_a_configured_litellm_callback_still_sees_every_call():
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    class Counting(CustomLogger):
        calls = 0

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            Counting.calls += 1

    counting = Counting()
    litellm.callbacks.append(counting)
    try:
        roles = LLMRoles(config())
        for i in range(2):
            await roles.reflect(make_trace(i))
        for _ in range(100):  # litellm logs in a background task
            if Counting.calls >= 2:
                break
            await asyncio.sleep(0.02)
    finally:
        litellm.callbacks.remove(counting)
    assert Counting.calls == 2


async def test_responder_replaces_litellm_and_concurrency_is_bounded():
    in_flight, peak = 0, 0

    async def responder(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return LLMReply(text='{"insights": [], "entry_tags": []}', usage=Usage(prompt_tokens=1, calls=1), latency_s=2)

    limited = RoleConfig(concurrency=2)
    roles = LLMRoles(LLMConfig(reflector=limited), responder=responder)
    reflections = await asyncio.gather(*(roles.reflect(make_trace(i)) for i in range(6)))
    assert peak == 2
    assert all(r.insights == [] and r.latency_s == 2 for r in reflections)


async def test_non_retryable_responder_error_is_not_retried():
    calls = 0

    async def responder(request):
        nonlocal calls
        calls += 1
        raise LLMCallError(request.role, request.model, "bad request", retryable=False)

    with pytest.raises(LLMCallError):
        await LLMRoles(config(), responder=responder).reflect(make_trace(1))
    assert calls == 1


def test_config_from_settings():
    settings = CombeeSettings.load(env={}, aggregator_model="combee-sim/big", sim_clock="virtual", run_seed=9)
    cfg = LLMConfig.from_settings(settings)
    assert cfg.aggregator.model == "combee-sim/big" and cfg.reflector.model == "combee-sim/default"
    assert cfg.simulator.seed == 9 and cfg.simulator.mode == "virtual" and cfg.simulator.capacity == 12
    assert cfg.reducer.max_retries == settings.llm_max_retries


def test_the_aggregator_starts_with_room_for_one_batchs_calls_within_the_configured_concurrency():
    def start(**values) -> tuple[int, int]:
        cfg = LLMConfig.from_settings(CombeeSettings.load(env={}, **values))
        return cfg.aimd("aggregator").initial, cfg.aimd("reflector").initial

    assert start(auto_batch_size=True, controller_bs_max=100) == (34, 8)  # 200 copies, at most 6 per call
    assert start(auto_batch_size=True) == (54, 8)  # the async quality bound, 160: 320 copies
    assert start(auto_batch_size=True, fleet_mode="sync") == (34, 8)
    assert start(batch_size=40) == (14, 8)
    assert start(batch_size=9) == (8, 8)  # fewer calls than llm_concurrency: its start stands
    assert start(auto_batch_size=True, controller_bs_max=100, llm_concurrency_max=8) == (8, 8)  # fixed: kept
    assert start(batch_size=200, llm_concurrency_max=50) == (50, 8)


def test_importing_combee_core_and_llm_modules_does_not_import_litellm():
    code = (
        "import sys, combee_core, combee_core.llm, combee_core.llm.prompts, combee_core.llm.parsing,"
        " combee_core.llm.simulator, combee_core.llm.errors;"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('litellm','openai')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_litellm_import_and_sim_call_need_no_network(fresh_import_facts):
    """In a fresh interpreter whose sockets refuse every connection and name lookup from the start, every
    combee_core module (litellm among what they load) imports and a simulated call goes through litellm without
    trying the network, and prints nothing (no litellm banners). tests/unit/fresh_interpreter.py"""
    walk, call = fresh_import_facts["core_walk"], fresh_import_facts["sim_call"]
    for stage in (walk, call):
        assert "error" not in stage, stage["error"]
    assert walk["facts"]["litellm"]  # imported with the network refused
    assert walk["network_attempts"] == call["network_attempts"] == []
    assert call["facts"]["insight"] == "Use SUMIFS.", call
    assert call["facts"]["cost_usd"] > 0
    assert walk["printed"] == call["printed"] == fresh_import_facts["stdout"] == ""
