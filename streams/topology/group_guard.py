"""A stage's consumer whose group never assigns it is recreated after a bounded wait, with a log line.

On Tansu, once, all three workers of a run SIGTERMed and restarted within its 6 s session timeout left two groups
answering JoinGroup at one generation without ever completing a SyncGroup (docs/broker.md, "Consumer groups on
Tansu"): aiokafka's ``start()`` of a group consumer waits for its first assignment, so such a stage never started,
and nothing said so. :func:`start_in_group` gives a join :func:`join_wait_s` (three times what a join can take: a
dead member's session timeout plus the rebalance timeout), then stops that consumer and starts a new one (a new
member id, a fresh JoinGroup), saying so, until one is assigned or the stage is stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from streams.broker.admin import close_client
from streams.broker.profile import BrokerProfile

log = logging.getLogger(__name__)

JOIN_WAIT_FACTOR = 3
"""A join gets this many times (session timeout + rebalance timeout) before its consumer is recreated."""
STOP_WAIT_S = 5.0
"""How long a stuck consumer gets to stop before it is left behind."""


class GroupConsumer(Protocol):
    """What is used of an aiokafka consumer subscribed in a group: its start waits for the first assignment."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


C = TypeVar("C", bound=GroupConsumer)


def join_wait_s(profile: BrokerProfile) -> float:
    """Seconds a group join may take before the consumer is recreated: 36 s on Tansu, 210 s on Kafka."""
    return JOIN_WAIT_FACTOR * (profile.session_timeout_ms + profile.rebalance_timeout_ms) / 1000


async def start_in_group(make: Callable[[], C], wait_s: float, what: str) -> C:
    """Start a consumer from ``make`` (a new one, subscribed, each call) and return it once its group has assigned
    it; one that is not assigned within ``wait_s`` is stopped and replaced, with a warning each time."""
    attempt = 1
    while True:
        consumer = make()
        try:
            await asyncio.wait_for(consumer.start(), wait_s)
        except TimeoutError:
            log.warning("%s: its consumer group did not assign it within %.0f s (a join that never completes, seen "
                        "on Tansu after a fast full restart); recreating its consumer (attempt %d)", what, wait_s,
                        attempt + 1)
            await close_client(consumer.stop(), f"{what}'s stuck consumer", STOP_WAIT_S)
            attempt += 1
            continue
        if attempt > 1:
            log.info("%s: its group assigned it after %d consumers", what, attempt)
        return consumer
