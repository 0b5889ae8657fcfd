"""A stage ended by a CancelledError that its task was not sent (a future cancelled inside a client) says so in the
log, with where it came from; a stage cancelled by the worker does not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.topology.worker import _run_stage


class _Stage:
    name = "batch"

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        await self.future


async def test_a_cancelled_future_under_a_stage_is_logged_with_its_origin(caplog):
    stage = _Stage()
    task = asyncio.create_task(_run_stage(stage))
    await asyncio.sleep(0)
    stage.future.cancel()  # as a client cancelling one of its own futures
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    [record] = [r for r in caplog.records if "was not sent" in r.getMessage()]
    assert "stage batch" in record.getMessage() and "raised at" in record.getMessage()
    assert record.exc_info is None  # one line: a stopping worker's log holds no traceback


async def test_a_stage_the_worker_cancels_is_not_logged(caplog):
    stage = _Stage()
    task = asyncio.create_task(_run_stage(stage))
    await asyncio.sleep(0)
    task.cancel()
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await task
    assert not [r for r in caplog.records if "was not sent" in r.getMessage()]
