"""The adaptive LLM concurrency (AIMD): the pure controller, and its gates in the role client."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.control.concurrency import (
    AimdConfig,
    ConcurrencyController,
    reflector_capacity,
    version_chain_capacity,
)
from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMCallError
from combee_core.llm.gates import ConcurrencyGates
from combee_core.llm.provider_errors import retry_after_s
from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles
from combee_core.models import Trace


def saturated_window(controller: ConcurrencyController, latency_s: float) -> None:
    for _ in range(controller.limit):
        controller.on_success(latency_s, in_flight=controller.limit)


def test_raises_while_latency_holds_up_to_the_ceiling_doubling_until_the_first_backoff() -> None:
    controller = ConcurrencyController(AimdConfig(initial=4, ceiling=40, increase=2))
    limits = []
    for _ in range(5):
        saturated_window(controller, 1.0)
        limits.append(controller.limit)
    assert limits == [8, 16, 32, 40, 40]
    controller.on_overload(0.0, "429")  # 20, and additive from now on
    saturated_window(controller, 1.0)
    assert controller.limit == 22


def test_not_raised_when_the_role_does_not_use_its_limit() -> None:
    controller = ConcurrencyController(AimdConfig(initial=4, ceiling=10))
    for _ in range(50):
        controller.on_success(1.0, in_flight=2)
    assert controller.limit == 4


def test_eases_off_when_latency_rises_and_halves_on_overload_once_per_window() -> None:
    controller = ConcurrencyController(AimdConfig(initial=20, ceiling=40, latency_tolerance=1.5,
                                                  latency_decrease=0.9, backoff_window_s=5), slow_start=False)
    saturated_window(controller, 1.0)  # baseline 1 s, raised to 22
    assert controller.limit == 22
    saturated_window(controller, 2.0)  # twice the baseline: eased off
    assert controller.limit == 19
    assert controller.on_overload(100.0, "429")
    assert controller.limit == 9
    assert not controller.on_overload(102.0, "429")  # the same burst: counted once
    assert controller.limit == 9
    assert controller.on_overload(106.0, "timeout")
    assert controller.limit == 4


def test_retry_after_holds_new_calls() -> None:
    controller = ConcurrencyController(AimdConfig(initial=8))
    controller.on_overload(10.0, "429", retry_after_s=3.0)
    assert controller.wait_s(11.0) == pytest.approx(2.0)
    assert controller.wait_s(13.5) == 0.0


@given(st.lists(st.one_of(
    st.tuples(st.just("ok"), st.floats(0, 100), st.integers(0, 200)),
    st.tuples(st.just("overload"), st.floats(0, 1000), st.one_of(st.none(), st.floats(0, 60))),
), max_size=300), st.integers(1, 16), st.integers(16, 128))
def test_limit_stays_within_floor_and_ceiling_and_overload_never_raises(events, floor, ceiling) -> None:
    controller = ConcurrencyController(AimdConfig(initial=ceiling // 2, floor=floor, ceiling=ceiling))
    now = 0.0
    for kind, value, extra in events:
        before = controller.limit
        if kind == "ok":
            controller.on_success(value, in_flight=extra)
        else:
            now += value
            controller.on_overload(now, "429", extra)
            assert controller.limit <= before
        assert floor <= controller.limit <= ceiling


def test_capacity_model() -> None:
    assert reflector_capacity(32, 1.0) == 32.0
    assert version_chain_capacity(40, 3.6) == pytest.approx(11.1, abs=0.05)
    with pytest.raises(ValueError):
        reflector_capacity(0, 1.0)


def test_retry_after_header_is_read() -> None:
    class Response:
        headers = {"retry-after": "2.5"}

    class Error(Exception):
        response = Response()

    assert retry_after_s(Error()) == 2.5
    assert retry_after_s(ValueError()) is None


def test_gates_never_exceed_the_limit_and_grow_under_load() -> None:
    gates = ConcurrencyGates(lambda role: AimdConfig(initial=2, ceiling=6))
    peak = 0
    running = 0

    async def call() -> None:
        nonlocal peak, running
        async with gates.slot("m", "reflector") as succeeded:
            running += 1
            peak = max(peak, running)
            assert running <= gates.limit("m", "reflector")
            await asyncio.sleep(0.001)
            running -= 1
            succeeded(0.001)

    async def main() -> None:
        await asyncio.gather(*(call() for _ in range(200)))

    asyncio.run(main())
    assert gates.limit("m", "reflector") == 6
    assert peak == 6


def test_a_rate_limited_model_backs_off_every_role_calling_it() -> None:
    """A responder answering 429 (as litellm's RateLimitError does, via the role client) halves the limit."""
    answers: list[str] = ["429", "429", "ok"]

    async def responder(request: LLMRequest) -> LLMReply:
        if answers.pop(0) == "429":
            raise LLMCallError(request.role, request.model, "RateLimitError: 429", overload=True)
        return LLMReply(text='{"insights": [], "entry_tags": []}')

    role = RoleConfig(model="m", concurrency=8, backoff_s=0.0)
    roles = LLMRoles(LLMConfig(reflector=role, aggregator=role, reducer=role, concurrency_ceiling=16),
                     responder=responder)
    trace = Trace(trace_id="t", playbook_id="pb", playbook_version=0, agent_id="a", task_id="x", input="i",
                  output="o", feedback="f", success=False, created_at=datetime.now(UTC))
    asyncio.run(roles.reflect(trace))
    assert roles.concurrency("reflector") == 4  # halved once: the second 429 fell in the same backoff window
    assert roles.concurrency("aggregator") == 8  # no gate yet for this role: its start value
