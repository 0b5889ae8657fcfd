"""The pause of a poll loop ends as soon as the loop is asked to stop, and says whether it was."""

from __future__ import annotations

import asyncio
import time

from streams.broker.stopping import stopped_within


async def test_a_pause_lasts_its_seconds_when_nobody_stops_it():
    started = time.monotonic()
    assert await stopped_within(asyncio.Event(), 0.05) is False
    assert time.monotonic() - started >= 0.05


async def test_a_stop_ends_the_pause_at_once_and_is_reported():
    stop = asyncio.Event()
    pausing = asyncio.create_task(stopped_within(stop, 3600))
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(pausing, 5) is True
    assert await asyncio.wait_for(stopped_within(stop, 3600), 5) is True  # already stopped: no pause at all
