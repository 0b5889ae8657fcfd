"""A burst of bad records is one log line per stage and error type, while every letter still reaches the dlq."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, NodeNotReadyError, UnknownError

from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology.dead_letters import make_dead_letter
from streams.topology.stage_context import StageContext


class _RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_and_wait(self, topic: str, payload: bytes, **_: object) -> None:
        self.sent.append(topic)


def test_a_burst_of_dead_letters_is_one_line_per_stage_and_error_type(caplog) -> None:
    producer = _RecordingProducer()
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=producer, stop=asyncio.Event())

    async def burst() -> None:
        for number in range(200):
            await context.dead_letter(make_dead_letter("reflect", f"invalid JSON at {number}", "TraceRejected", b"{"))
        await context.dead_letter(make_dead_letter("batch", "stale", "StaleTrace", b"{}"))

    with caplog.at_level(logging.WARNING, logger="streams.topology.stage_context"):
        asyncio.run(burst())
    lines = [r.getMessage() for r in caplog.records if "dead letter" in r.getMessage()]
    assert lines == ["dead letter from reflect: invalid JSON at 0", "dead letter from batch: stale"]
    assert len(producer.sent) == 201 and context.counters["dead_letters"] == 201


def test_a_stage_failure_from_a_validation_error_is_logged_without_the_input_values() -> None:
    from pydantic import BaseModel, ValidationError

    from combee_core.models import describe_error

    class Secretive(BaseModel):
        count: int

    try:
        Secretive.model_validate({"count": "sk-live-abc123"})
    except ValidationError as error:
        line = describe_error(error)
    assert "sk-live" not in line and line.startswith("ValidationError: 1 problem(s) in Secretive, first count:")
    assert describe_error(KeyError("x")) == "KeyError: 'x'"


class _CancellingProducer:
    """A producer whose first ack is cancelled under the sender, as aiokafka does to a batch on a broker loss."""

    def __init__(self) -> None:
        self.attempts = 0

    async def send_and_wait(self, topic: str, payload: bytes, **_: object) -> str:
        self.attempts += 1
        if self.attempts == 1:
            raise asyncio.CancelledError
        return "acknowledged"


def test_a_waited_send_the_producer_cancelled_is_sent_again_but_a_stopping_stage_still_stops() -> None:
    producer = _CancellingProducer()
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=producer, stop=asyncio.Event())
    assert asyncio.run(context.send("batches", "pb", b"{}", wait=True)) == "acknowledged"
    assert producer.attempts == 2

    async def stopped_while_sending() -> bool:
        blocked = asyncio.Event()

        class _Hanging:
            async def send_and_wait(self, *_: object, **__: object) -> None:
                blocked.set()
                await asyncio.sleep(3600)

        context.producer = _Hanging()
        task = asyncio.ensure_future(context.send("batches", "pb", b"{}", wait=True))
        await blocked.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(stopped_while_sending())


class _RefusingProducer:
    """A producer whose batch the broker refused, and which refuses the first resend too (storage still down)."""

    def __init__(self) -> None:
        self.resends = 0

    async def send(self, *_: object, **__: object) -> asyncio.Future:
        refused: asyncio.Future = asyncio.get_running_loop().create_future()
        refused.set_exception(KafkaError("UnknownServerError"))
        return refused

    async def flush(self) -> None:
        return None

    async def send_and_wait(self, *_: object, **__: object) -> str:
        self.resends += 1
        if self.resends == 1:
            raise KafkaError("UnknownServerError")
        return "acknowledged"


def test_flush_sends_a_refused_record_again_through_further_refusals_until_it_is_acknowledged() -> None:
    producer = _RefusingProducer()
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=producer, stop=asyncio.Event())

    async def send_then_flush() -> None:
        await context.send("traces", "t1", b"{}")
        await context.flush()

    asyncio.run(send_then_flush())
    assert producer.resends == 2


class _AwayThenBackProducer:
    """A broker away for a while (its node not ready: the durable broker restarting), then back."""

    def __init__(self, error: KafkaError, failures: int) -> None:
        self.error, self.failures, self.attempts = error, failures, 0

    async def send_and_wait(self, *_: object, **__: object) -> str:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return "acknowledged"


def test_a_waited_send_is_sent_again_while_the_broker_is_away_but_a_refusal_for_good_reaches_the_stage() -> None:
    """A kill test's worker exited ("broker error: NodeNotReadyError") when its batch stage's numbered write met the
    broker still restarting (45 s at load 22): a retriable error is waited out (the watchdog bounds the wait); an
    error no retry cures still fails the stage at once."""
    away = _AwayThenBackProducer(NodeNotReadyError("node 111 not ready"), failures=2)
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=away, stop=asyncio.Event())
    assert asyncio.run(context.send("batches", "pb", b"{}", wait=True)) == "acknowledged"
    assert away.attempts == 3

    context.producer = _AwayThenBackProducer(MessageSizeTooLargeError("too large"), failures=1)
    with pytest.raises(MessageSizeTooLargeError):
        asyncio.run(context.send("batches", "pb", b"{}", wait=True))


def test_a_waited_send_is_sent_again_through_the_unknown_error_a_broker_without_its_storage_answers() -> None:
    """Tansu answers UnknownError (-1) to every produce while its storage (SeaweedFS) is killed and restarting; a
    durable kill test's worker exited "broker error: UnknownError" when a stage's waited send met it."""
    storage_away = _AwayThenBackProducer(UnknownError(), failures=2)
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=storage_away, stop=asyncio.Event())
    assert asyncio.run(context.send("playbook", "pb", b"{}", wait=True)) == "acknowledged"
    assert storage_away.attempts == 3


class _TimedOutAsItRaises(_AwayThenBackProducer):
    """A refusal raised as the producer's own ``asyncio.timeout`` expires: Python 3.11 leaves this task's cancel
    pending with ``cancelling()`` back at 0 (what ``uncancel()`` in the timeout's exit does), so the next await ends
    in a CancelledError nobody sent."""

    async def send_and_wait(self, *args: object, **kwargs: object) -> str:
        task = asyncio.current_task()
        if self.attempts < self.failures and task is not None:
            task.cancel()
            task.uncancel()
        return await super().send_and_wait(*args, **kwargs)


def test_a_stray_cancel_in_a_send_s_back_off_ends_the_send_as_one_the_worker_runs_the_stage_again_after() -> None:
    """A durable kill test's batch, control and guard stages each met "a CancelledError its task was not sent" in the
    back-off after a NodeNotReadyError. The send does not hide it: it ends the send with ``cancelling()`` at 0, which
    is what the worker's ``_run_stage`` runs a stage again after (tests/unit/test_stage_cancelled_under_it.py); a
    cancel sent to the task (the stage stopping) ends it too."""
    stray = _TimedOutAsItRaises(NodeNotReadyError("node 111 not ready"), failures=1)
    context = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=stray, stop=asyncio.Event())

    async def send_under_a_stray_cancel() -> int:
        with pytest.raises(asyncio.CancelledError):
            await context.send("batches", "pb", b"{}", wait=True)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(send_under_a_stray_cancel()) == 0  # not sent to the task: a stray cancel
    assert stray.attempts == 1

    async def stopped_while_backing_off() -> None:
        context.producer = _AwayThenBackProducer(NodeNotReadyError("node 111 not ready"), failures=100)
        sending = asyncio.create_task(context.send("batches", "pb", b"{}", wait=True))
        await asyncio.sleep(0.1)
        sending.cancel()
        await sending

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(stopped_while_backing_off())
