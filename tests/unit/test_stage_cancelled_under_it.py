"""A stray cancel (a CancelledError a stage's task was not sent: a future cancelled under it inside a client, or a
cancel a client's timeout left pending) does not end the worker: the stage is logged with the frames it came through
and runs again as a new instance, a bounded number of times in a row. A cancel sent to the stage's task (the worker
stopping it) still ends it at once, and so does a stray cancel once the worker is stopping."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest
from aiokafka.errors import NodeNotReadyError

from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology import worker
from streams.topology.runtime import Stage
from streams.topology.stage_context import StageContext
from streams.topology.worker import _run_stage


@pytest.fixture(autouse=True)
def _short_pauses(monkeypatch):
    monkeypatch.setattr(worker, "STRAY_CANCEL_PAUSE_S", 0.001)


def _ctx() -> SimpleNamespace:
    counters: dict[str, int] = {}
    return SimpleNamespace(stop=asyncio.Event(), counters=counters,
                           count=lambda name: counters.__setitem__(name, counters.get(name, 0) + 1))


class _Stage:
    """A stand-in stage: each instance's run waits on a future of its own (a client's)."""

    name = "batch"

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        await self.future


class _TimedOutUnderIt(_Stage):
    """Its first instance meets what a client's timeout expiring as its block ends leaves on Python 3.11: the task's
    cancel still pending while ``cancelling()`` is back at 0 (``uncancel()``), so the next await raises."""

    instances = 0

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        type(self).instances += 1
        self.first = type(self).instances == 1

    async def run(self) -> None:
        if self.first:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            task.uncancel()
            await asyncio.sleep(3600)
        await self.ctx.stop.wait()


async def _until(condition, deadline_s: float = 5.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


def _stray_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "was not sent" in r.getMessage()]


async def test_a_future_cancelled_under_a_stage_runs_it_again_and_logs_the_frames_it_came_through(caplog):
    stages: list = [_Stage(_ctx())]
    first, watched = stages[0], []
    task = asyncio.create_task(_run_stage(stages, 0, lambda: watched.append(stages[0])))
    with caplog.at_level(logging.WARNING):
        await asyncio.sleep(0)
        first.future.cancel()  # as a client cancelling one of its own futures
        await _until(lambda: stages[0] is not first)
    assert not task.done() and watched == [stages[0]] and isinstance(stages[0], _Stage)
    [line] = _stray_lines(caplog)
    message = line.getMessage()
    assert "stage batch" in message and "running the stage again (1 of 5)" in message
    assert "test_stage_cancelled_under_it.py" in message and " run" in message  # the stage's own frame, not asyncio's
    assert line.exc_info is None  # one line
    assert first.ctx.counters == {"stray_cancels.batch": 1}

    first.ctx.stop.set()
    stages[0].future.set_result(None)
    await asyncio.wait_for(task, 5)  # the new instance ran to its end: the stage's task returns


async def test_a_cancel_a_timeout_left_pending_raised_in_a_sleep_runs_the_stage_again(caplog):
    """The durable kill test's reduce and control stages ended "by a CancelledError its task was not sent (raised at
    asyncio/tasks.py:649 in sleep)" and took the worker with them."""
    _TimedOutUnderIt.instances = 0
    ctx = _ctx()
    stages: list = [_TimedOutUnderIt(ctx)]
    task = asyncio.create_task(_run_stage(stages, 0))
    with caplog.at_level(logging.WARNING):
        await _until(lambda: _TimedOutUnderIt.instances == 2)
    [line] = _stray_lines(caplog)
    assert "asyncio/tasks.py" in line.getMessage() and "test_stage_cancelled_under_it.py" in line.getMessage()
    await asyncio.sleep(0.01)
    assert not task.done()
    ctx.stop.set()
    await asyncio.wait_for(task, 5)


class _RefusedAsItsTimeoutExpires:
    """A producer whose first send is refused (the broker restarting) as its own timeout expires: Python 3.11 leaves
    the task's cancel pending with ``cancelling()`` at 0, so the send's back-off meets a stray cancel. Then the
    broker is back."""

    def __init__(self) -> None:
        self.attempts, self.acknowledged = 0, 0

    async def send_and_wait(self, *args: object, **kwargs: object) -> str:
        self.attempts += 1
        if self.attempts == 1:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            task.uncancel()
            raise NodeNotReadyError("node 111 not ready")
        self.acknowledged += 1
        return "acknowledged"


async def test_a_stray_cancel_in_a_send_s_back_off_runs_the_stage_again_and_the_new_instance_sends_it(caplog):
    """What a durable kill test's batch, control and guard stages met after a NodeNotReadyError: the stage is run
    again (its uncommitted input is delivered again, so its write is made again) and the worker goes on."""

    class _Sending(_Stage):
        async def run(self) -> None:
            await self.ctx.send("batches", "pb", b"{}", wait=True)
            await self.ctx.stop.wait()

    producer = _RefusedAsItsTimeoutExpires()
    ctx = StageContext(settings=CombeeSettings(), bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                       producer=producer, stop=asyncio.Event())
    stages: list = [_Sending(ctx)]
    first = stages[0]
    task = asyncio.create_task(_run_stage(stages, 0))
    with caplog.at_level(logging.WARNING):
        await _until(lambda: producer.acknowledged == 1)
    assert stages[0] is not first and ctx.counters.get("stray_cancels.batch") == 1 and not task.done()
    assert "asyncio/tasks.py" in _stray_lines(caplog)[0].getMessage()  # raised in the back-off's sleep
    ctx.stop.set()
    await asyncio.wait_for(task, 5)


async def test_a_stage_the_worker_cancels_is_not_run_again(caplog):
    stages: list = [_Stage(_ctx())]
    first = stages[0]
    task = asyncio.create_task(_run_stage(stages, 0))
    await asyncio.sleep(0)
    task.cancel()
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await task
    assert stages == [first] and not _stray_lines(caplog)


async def test_a_stray_cancel_while_the_worker_stops_ends_the_stage(caplog):
    stages: list = [_Stage(_ctx())]
    first = stages[0]
    task = asyncio.create_task(_run_stage(stages, 0))
    await asyncio.sleep(0)
    first.ctx.stop.set()
    first.future.cancel()
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await task
    assert stages == [first] and not _stray_lines(caplog)


async def test_a_stage_cancelled_under_it_again_and_again_ends_after_the_bound(caplog):
    class _Always(_Stage):
        async def run(self) -> None:
            self.future.cancel()
            await self.future

    ctx = _ctx()
    stages: list = [_Always(ctx)]
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(_run_stage(stages, 0), 5)
    assert ctx.counters == {"stray_cancels.batch": worker.STRAY_CANCEL_RERUNS + 1}
    assert "times in a row" in _stray_lines(caplog)[-1].getMessage()


async def test_a_stage_run_that_ends_by_a_cancel_cancels_its_background_work():
    """Work in flight of a run that ended must not outlive it into the stage's next run."""

    class _Spawning(Stage):
        async def _prepare_and_join(self):
            self.work = self.spawn(asyncio.sleep(3600), name="work")
            await asyncio.sleep(0)
            raise asyncio.CancelledError  # as a stray cancel would

    stage = _Spawning(SimpleNamespace(stop=asyncio.Event()))
    with pytest.raises(asyncio.CancelledError):
        await stage.run()
    await asyncio.sleep(0)
    assert stage.work.cancelled()


async def test_an_error_that_ends_a_stage_is_logged_with_the_stage_and_where_it_was_raised(caplog):
    """The worker's exit line ("broker error: UnknownError") says neither which stage nor where."""

    class _Failing(_Stage):
        async def run(self) -> None:
            raise KeyError("lost")

    with caplog.at_level(logging.ERROR), pytest.raises(KeyError):
        await _run_stage([_Failing(_ctx())], 0)
    [line] = [r for r in caplog.records if "failed" in r.getMessage()]
    assert "stage batch failed: KeyError" in line.getMessage()
    assert "test_stage_cancelled_under_it.py" in line.getMessage()
