"""A record the broker keeps refusing (Tansu answers UnknownError to every produce while its storage restarts) is
sent again for at most ``broker_loss_grace_s`` from its first refusal; then the send fails with one line naming the
topic and how long it was tried, instead of waiting for ever (a broker that answers never trips the watchdog)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.errors import MessageSizeTooLargeError, UnknownError
from hypothesis import given
from hypothesis import strategies as st

from combee_core.processors.resend import RecordRefused, ResendBudget
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology.stage_context import StageContext


class _Refusing:
    """A producer whose broker answers UnknownError to the first ``refusals`` sends (for ever with None)."""

    def __init__(self, refusals: int | None = None, error: Exception | None = None) -> None:
        self.refusals, self.error, self.attempts = refusals, error or UnknownError(), 0

    async def send_and_wait(self, topic: str, payload: bytes, **kwargs: object) -> str:
        self.attempts += 1
        if self.refusals is None or self.attempts <= self.refusals:
            raise self.error
        return f"stored in {topic}"


def _ctx(producer: _Refusing, grace_s: float) -> StageContext:
    settings = CombeeSettings(topic_prefix="t.", broker_loss_grace_s=grace_s)
    return StageContext(settings=settings, bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                        producer=producer, stop=asyncio.Event())  # type: ignore[arg-type]


async def test_a_waited_send_the_broker_keeps_refusing_fails_after_the_budget_naming_the_topic():
    producer = _Refusing()
    started = time.monotonic()
    with pytest.raises(RecordRefused) as raised:
        await asyncio.wait_for(_ctx(producer, grace_s=0.3).send("batches", "pb", b"{}", wait=True), 10)
    took = time.monotonic() - started
    message = str(raised.value)
    assert "\n" not in message and "t.batches" in message and "UnknownError" in message, message
    assert "for 0.3 s" in message and "broker_loss_grace_s=0.3" in message, message
    assert 0.3 <= took < 5.0 and producer.attempts == 2  # at once, then once more when the budget ends
    assert raised.value.exit_code == 3


async def test_a_waited_send_the_broker_refuses_for_a_while_is_stored():
    producer = _Refusing(refusals=2)
    written = await asyncio.wait_for(_ctx(producer, grace_s=60).send("playbook", "pb", b"{}", wait=True), 10)
    assert written == "stored in t.playbook" and producer.attempts == 3


async def test_a_refusal_no_retry_cures_is_raised_at_once():
    producer = _Refusing(error=MessageSizeTooLargeError())
    with pytest.raises(MessageSizeTooLargeError):
        await _ctx(producer, grace_s=60).send("playbook", "pb", b"{}", wait=True)
    assert producer.attempts == 1


@given(budget_s=st.floats(0.01, 600), gaps=st.lists(st.floats(0, 30), min_size=1, max_size=60))
def test_sends_again_until_the_budget_and_never_waits_past_it(budget_s, gaps):
    """However late each refusal comes: the waits back off to at most 5 s, none ends after the budget, and the
    budget is spent exactly when the time since the first refusal reaches it."""
    budget, now, first = ResendBudget(budget_s), 1000.0, 1000.0
    for gap in gaps:
        delay = budget.refused(now)
        if first + budget_s - now <= 0:
            assert delay is None
            return
        assert delay is not None and 0 < delay <= 5.0 and now + delay <= first + budget_s + 1e-9
        now += delay + gap
