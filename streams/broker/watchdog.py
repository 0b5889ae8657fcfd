"""Noticing a lost broker: a watchdog asks the broker every few seconds and stops a long-running command (a worker,
``combee tail``) that has been without an answer for longer than its grace, or whose broker came back without the
run's topics (a memory-only broker that was restarted).

Kafka clients retry forever on their own; without this a worker would wait, and log, until a broker answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from combee_core.connection import PLAINTEXT, KafkaConnection
from streams.broker.errors import BrokerLost
from streams.broker.probe import kafka_answers
from streams.broker.stopping import stopped_within

log = logging.getLogger(__name__)


@dataclass
class BrokerWatchdog:
    """Sets ``stop`` (and :attr:`cause`) when the broker is lost; logs one line when it stops answering, one every
    ``report_every_s`` while it stays away, and one when it is back."""

    bootstrap: str
    grace_s: float
    stop: asyncio.Event
    topics: Collection[str] = ()
    """Topics that, once seen, must stay while the broker answers: missing twice in a row -> it lost its data."""
    interval_s: float = 2.0
    report_every_s: float = 15.0
    clock: Callable[[], float] = time.monotonic
    cause: BrokerLost | None = field(default=None, init=False)
    unreachable_since: float | None = field(default=None, init=False)
    """When (``clock``) the broker stopped answering; None while it answers."""
    seen: Collection[str] = ()
    """Of :attr:`topics`, those already known to exist (the command checked at start): watched from the first check."""
    connection: KafkaConnection = PLAINTEXT
    """How to reach the broker (TLS, SASL): the profile's."""
    _seen: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._seen.update(set(self.topics) & set(self.seen))

    async def run(self) -> None:
        """Watch until ``stop`` is set (by anyone); then return. Never raises for a broker problem."""
        last_report = 0.0
        missing_before: set[str] = set()
        while not self.stop.is_set():
            answered = await kafka_answers(self.bootstrap, timeout_s=min(2.0, self.interval_s),
                                           connection=self.connection)
            now = self.clock()
            if answered:
                if self.unreachable_since is not None:
                    log.warning("broker %s answers again after %.0f s", self.bootstrap, now - self.unreachable_since)
                    self.unreachable_since = None
                missing = await self._missing_topics() if self.topics else set()
                if missing and missing & missing_before:
                    self._lost(f"the broker at {self.bootstrap} answers but no longer has topic(s) "
                               f"{', '.join(sorted(missing))} (restarted without its data?); restart this command")
                    return
                missing_before = missing
            elif self.unreachable_since is None:
                self.unreachable_since = last_report = now
                log.warning("broker %s does not answer; stopping in %.0f s unless it comes back", self.bootstrap,
                            self.grace_s)
            elif now - self.unreachable_since >= self.grace_s:
                self._lost(f"lost the broker at {self.bootstrap}: no answer for {now - self.unreachable_since:.0f} s "
                           f"(broker_loss_grace_s={self.grace_s:g}); restart this command once it is back")
                return
            elif now - last_report >= self.report_every_s:
                last_report = now
                away = now - self.unreachable_since
                log.warning("broker %s has not answered for %.0f s; stopping in %.0f s unless it comes back",
                            self.bootstrap, away, self.grace_s - away)
            await stopped_within(self.stop, self.interval_s)

    def _lost(self, reason: str) -> None:
        self.cause = BrokerLost(reason)
        self.stop.set()

    async def _missing_topics(self) -> set[str]:
        """Which of :attr:`topics` seen before the broker's metadata now lacks (none when it cannot be had)."""
        from aiokafka import AIOKafkaClient
        from aiokafka.errors import KafkaError

        from streams.broker.connection import client_kwargs

        client = AIOKafkaClient(**client_kwargs(self.bootstrap, self.connection), request_timeout_ms=5000)
        try:
            await asyncio.wait_for(client.bootstrap(), 10)
            existing = client.cluster.topics()
        except (TimeoutError, KafkaError, OSError) as error:
            log.debug("topic check on %s failed: %s", self.bootstrap, error)
            return set()
        finally:
            with contextlib.suppress(KafkaError, OSError):
                await client.close()
        self._seen.update(set(self.topics) & set(existing))
        return self._seen - set(existing)


@contextlib.asynccontextmanager
async def watching(watchdog: BrokerWatchdog):
    """Run ``watchdog`` in the background for the duration of the block."""
    task = asyncio.create_task(watchdog.run(), name="broker-watchdog")
    try:
        yield watchdog
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
