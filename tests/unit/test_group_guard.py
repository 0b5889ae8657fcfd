"""A stage's consumer whose group never assigns it is stopped and replaced after a bounded wait, with a log line."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.broker.profile import BrokerProfile
from streams.topology.group_guard import join_wait_s, start_in_group


class Consumer:
    """A group consumer whose start returns once its group assigns it; ``assigns=False``: never (the stall)."""

    def __init__(self, assigns: bool) -> None:
        self.assigns, self.stopped = assigns, False

    async def start(self) -> None:
        if not self.assigns:
            await asyncio.Event().wait()

    async def stop(self) -> None:
        self.stopped = True


async def test_a_consumer_never_assigned_is_recreated_and_the_log_says_so(caplog):
    made: list[Consumer] = []

    def make() -> Consumer:
        made.append(Consumer(assigns=len(made) >= 2))  # the first two joins never complete
        return made[-1]

    with caplog.at_level(logging.INFO, logger="streams.topology.group_guard"):
        started = await asyncio.wait_for(start_in_group(make, 0.05, "stage reduce"), 5)
    assert started is made[2] and not started.stopped
    assert [c.stopped for c in made[:2]] == [True, True]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all(w.startswith("stage reduce: its consumer group did not assign it") for w in warnings)
    assert "attempt 3" in warnings[1]
    assert any("after 3 consumers" in r.getMessage() for r in caplog.records)


async def test_a_consumer_assigned_in_time_is_kept():
    made: list[Consumer] = []

    def make() -> Consumer:
        made.append(Consumer(assigns=True))
        return made[-1]

    assert await start_in_group(make, 5.0, "stage batch") is made[0] and len(made) == 1


async def test_a_failed_start_is_not_retried():
    class Broken(Consumer):
        async def start(self) -> None:
            raise RuntimeError("no such topic")

    with pytest.raises(RuntimeError, match="no such topic"):
        await start_in_group(lambda: Broken(True), 5.0, "stage batch")


def test_the_wait_is_longer_than_any_normal_join():
    """A join waits at most a dead member's session timeout plus the rebalance timeout."""
    for profile in (BrokerProfile.for_tansu(), BrokerProfile.for_kind("kafka")):
        assert join_wait_s(profile) >= 2 * (profile.session_timeout_ms + profile.rebalance_timeout_ms) / 1000
