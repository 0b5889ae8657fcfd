"""ingest-otlp: OTLP span batches (the Collector's Kafka exporter's records, or ``combee otlp-receiver``'s) ->
one trace per run on ``traces``. Runs only with ``COMBEE_OTLP_INGEST=1``.

The decisions are ``combee_core.otlp.processor``'s; this stage decodes records, passes the time and performs
the effects. A record is committed only once every run it holds spans of is published or dead-lettered. Pending runs
live in memory: when partitions move (or the worker stops) they are forgotten and their records, uncommitted, are
delivered again; the partitions still owned that held some of them are read again from their committed offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.otlp.processor import OtlpIngest
from combee_core.otlp.wire import OtlpSpan, decode_spans
from combee_core.processors.effects import Acknowledge, Effect
from combee_core.topology import INGEST_OTLP
from streams.topology.effects import perform
from streams.topology.runtime import Stage


@dataclass(frozen=True)
class _Held:
    """A record as the assembler's token: hashable by its position (aiokafka's records are not hashable)."""

    topic: str
    partition: int
    offset: int
    record: ConsumerRecord = field(compare=False, hash=False)


def _records(effects: Iterable[Effect]) -> list[Effect]:
    """The processor's effects with its tokens turned back into the records ``perform`` acknowledges."""
    return [Acknowledge(tuple(_record(token) for token in effect.tokens)) if isinstance(effect, Acknowledge)
            else effect for effect in effects]


def _record(token: object) -> ConsumerRecord:
    assert isinstance(token, _Held), f"ingest-otlp's tokens are held records, not {type(token)}"
    return token.record


class OtlpIngestStage(Stage):
    spec = INGEST_OTLP

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.ingest = OtlpIngest.from_settings(ctx.settings)

    def decode(self, raw: bytes | None) -> list[OtlpSpan]:
        return decode_spans(raw or b"")

    async def handle(self, record: ConsumerRecord, spans: list[OtlpSpan]) -> None:
        token = _Held(record.topic, record.partition, record.offset, record)
        await perform(self, _records(self.ingest.take(spans, token, time.monotonic())))

    async def tick(self, now: float) -> None:
        await perform(self, _records(self.ingest.tick(now)))

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        for held in self.ingest.reset():
            assert isinstance(held, _Held)
            tp = TopicPartition(held.topic, held.partition)
            if tp not in revoked:
                self.mark_stale(tp)  # it held spans of a forgotten run: read it again from its committed offset
