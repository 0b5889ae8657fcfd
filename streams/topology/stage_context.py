"""What every stage gets from its worker: settings, the broker, one shared producer, the LLM roles, counters."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, UnknownError
from aiokafka.structs import RecordMetadata

from combee_core.ingest.redaction import RedactionConfig
from combee_core.log_limit import RepeatLimit
from combee_core.models import CombeeModel, DeadLetter
from combee_core.processors.resend import ResendBudget
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.redaction import redact_dead_letter

if TYPE_CHECKING:
    from combee_core.llm.roles import LLMRoles

log = logging.getLogger(__name__)

DEAD_LETTER_LOG_INTERVAL_S = 30.0
"""At most one dead-letter line per stage and error type in this many seconds (each letter is on the dlq topic and
counted in ``dead_letters.<stage>.<error_type>``)."""


@dataclass
class StageContext:
    """Everything a stage needs from its worker: settings, broker, one shared producer, the LLM roles."""

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    producer: AIOKafkaProducer
    stop: asyncio.Event
    llm: LLMRoles | None = None
    counters: dict[str, int] = field(default_factory=dict)
    _sends: list[tuple[asyncio.Future, str, bytes, bytes, tuple[tuple[str, bytes], ...]]] = field(
        default_factory=list, repr=False)
    """Records sent without waiting, until :meth:`flush` has seen them acknowledged (or sent them again)."""
    _resending: set[asyncio.Task] = field(default_factory=set, repr=False)
    _dead_letter_lines: RepeatLimit[tuple[str, str]] = field(
        default_factory=lambda: RepeatLimit(DEAD_LETTER_LOG_INTERVAL_S), repr=False)
    """One log line per stage and error type (a burst of bad records is not a burst of lines)."""

    @property
    def roles(self) -> LLMRoles:
        """The LLM roles, which the worker builds for the stages that call the LLM (reflect, aggregate, reduce)."""
        if self.llm is None:
            raise RuntimeError("this worker has no LLM roles: only the reflect, aggregate and reduce stages get them")
        return self.llm

    @cached_property
    def redaction(self) -> RedactionConfig:
        """What redaction applies (``settings.redact*``), parsed once."""
        return RedactionConfig.from_settings(self.settings)

    def count(self, name: str, amount: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + amount

    async def send(
        self, topic: str, key: str, value: CombeeModel | bytes, *, wait: bool = False,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> RecordMetadata | None:
        """Send a model to a logical topic (name without prefix). ``wait`` blocks until the broker acks and returns
        where the record landed."""
        payload = value if isinstance(value, bytes) else value.to_json_bytes()
        full_topic = self.settings.topic(topic)
        self.count(f"records_out.{topic}")
        if wait:
            return await self._send_and_wait(full_topic, payload, key.encode(), headers)
        future = await self.producer.send(full_topic, payload, key=key.encode(), headers=list(headers) or None)
        self._sends.append((future, full_topic, payload, key.encode(), headers))
        if len(self._sends) > 10_000:  # no flush for a long while: keep only what is not yet known to be stored
            self._sends = [s for s in self._sends if not s[0].done() or s[0].cancelled() or s[0].exception()]
        return None

    async def flush(self) -> None:
        """Everything sent so far is on the broker when this returns: the producer is flushed, and a record the
        broker refused (aiokafka does not retry every error: Tansu answers UnknownServerError while its storage is
        down) is sent again, until it is acknowledged. Only then may a stage commit the offsets behind it
        (``streams.topology.commit_order``); without this such a record was lost and its input committed."""
        await self.producer.flush()
        sends, self._sends = self._sends, []
        for future, topic, payload, key, headers in sends:
            if not future.done():
                await asyncio.wait([future])
            if future.cancelled() or future.exception() is not None:
                error = "cancelled" if future.cancelled() else repr(future.exception())
                task = asyncio.ensure_future(self._resend(topic, payload, key, headers, error))
                self._resending.add(task)
                task.add_done_callback(self._resending.discard)
        if self._resending:
            await asyncio.gather(*list(self._resending))

    async def _send_and_wait(self, topic: str, payload: bytes, key: bytes,
                             headers: tuple[tuple[str, bytes], ...]) -> RecordMetadata:
        """Send and wait for the ack; a send the producer cancelled under us (aiokafka cancels a batch's futures on
        some broker losses) is sent again, unless the stage itself is stopping. Without this a numbered record's
        write (the batcher's manifest) ended its stage "cancelled" while the broker was down (a kill test, issue 40);
        sending again is safe: the first record of each number counts, and a dead letter may repeat."""
        return await self._send_until_acked(topic, payload, key, headers, refused=None)

    async def _resend(self, topic: str, payload: bytes, key: bytes, headers: tuple[tuple[str, bytes], ...],
                      error: str) -> None:
        """A record the broker refused (``error``): sent again, through refusals too, until it is acknowledged."""
        await self._send_until_acked(topic, payload, key, headers, refused=error)

    async def _send_until_acked(self, topic: str, payload: bytes, key: bytes, headers: tuple[tuple[str, bytes], ...],
                                *, refused: str | None) -> RecordMetadata:
        """Send until acknowledged, backing off 0.5 s doubling to 5 s between attempts, for at most
        ``settings.broker_loss_grace_s`` from the first refusal (``combee_core.processors.resend``): then the send
        raises :class:`~combee_core.processors.resend.RecordRefused` naming the topic and how long it was tried, and
        its stage fails (a broker that answers every produce with a refusal never trips the watchdog; without the
        bound the stage waited for ever). Within the budget: a send the producer cancelled is sent again (unless
        this task itself is being cancelled: the stage is stopping); a broker's refusal (KafkaError) when
        ``refused`` says the record was refused once already, or when the error is retriable (the broker away or
        restarting: NodeNotReadyError, a connection lost) or the broker's UnknownError (:func:`_worth_another_try`);
        a waited send raises any other refusal to its stage. A stray cancel (one this task was not sent) in the
        back-off ends the send like any other: the worker runs the stage again as a new instance
        (``streams.topology.worker._run_stage``) and the records it had not committed are delivered again."""
        budget = ResendBudget(self.settings.broker_loss_grace_s)
        while True:
            if refused is not None:
                log.warning("a record to %s was refused (%s); sending it again (attempt %d)", topic, refused,
                            budget.refusals + 1)
            try:
                return await self.producer.send_and_wait(topic, payload, key=key, headers=list(headers) or None)
            except KafkaError as failed:
                if refused is None and not _worth_another_try(failed):
                    raise  # no retry cures it (a record too large, a topic not authorized): the stage decides
                refused = last = repr(failed)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the stage itself is being stopped
                    raise
                last = "the producer cancelled it"  # aiokafka cancels a batch's futures on some broker losses
                if refused is None:
                    log.warning("a record to %s was cancelled by the producer (a broker loss?); sending it again",
                                topic)
                else:
                    refused = last
            delay = budget.refused(time.monotonic())
            if delay is None:
                raise budget.gave_up(topic, time.monotonic(), last)
            await asyncio.sleep(delay)

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Publish a dead letter (always waits: a dead letter must never be lost), redacted before it is logged or
        sent (``streams.topology.redaction``)."""
        letter = redact_dead_letter(self.redaction, self.settings, self.count, letter)
        self.count("dead_letters")
        self.count(f"dead_letters.{letter.stage}.{letter.error_type}")
        occurrences = self._dead_letter_lines.observe((letter.stage, letter.error_type), time.monotonic())
        if occurrences == 1:
            log.warning("dead letter from %s: %s", letter.stage, letter.reason)
        elif occurrences is not None:
            log.warning("%d dead letters from %s (%s) since the last line; the latest: %s",
                        occurrences, letter.stage, letter.error_type, letter.reason)
        await self.send(Topic.DLQ, letter.stage, letter, wait=True)


def _worth_another_try(refusal: KafkaError) -> bool:
    """A refusal that sending again may cure: a retriable one, or UnknownError (error code -1, "an unexpected server
    error"), which Tansu answers to every produce while its storage does not answer (the durable broker's SeaweedFS
    killed and restarting). A durable kill test's worker exited "broker error: UnknownError" when a stage's waited
    send met it; a flushed record was already sent again through it (:meth:`StageContext.flush`)."""
    return refusal.retriable or isinstance(refusal, UnknownError)

