"""Ingest + reflector: validate each trace, reflect on it with the LLM, publish the reflection.

A bad message (too large, not UTF-8, not JSON, wrong schema) or a failed reflection becomes a dead letter with the
reason; the stage keeps going. Reflections of one fetch are computed concurrently, and the next fetches are taken
while they run (``OrderedFetches``: at most two calls per concurrency slot in flight); each fetch is published after
the one before it, in input order, so the per-playbook order of reflections follows the order of traces (replays
batch identically): the decisions are ``combee_core.reflect.processor``'s, the runtime decodes the traces
(``decode_trace``, the strictest reading).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import cast

import orjson
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError
from pydantic import ValidationError

from combee_core import limits
from combee_core.batch.batching import UPSTREAM_DRAINED
from combee_core.errors import CombeeError
from combee_core.models import Trace
from combee_core.processors.effects import Effect, Publish, Reject, acknowledge
from combee_core.reflect.processor import inherited_used, reflect_all
from combee_core.topology import REFLECT
from streams.topology.effects import perform
from streams.topology.ordered_fetches import OrderedFetches
from streams.topology.playbook_view import PlaybookVersions, used_entries_text
from streams.topology.redaction import redact_trace_counted
from streams.topology.runtime import Stage
from streams.topology.stage_records import Delivery
from streams.topology.views.backlog import BacklogWatch

log = logging.getLogger(__name__)

CONTEXT_WAIT_S = 5.0
"""How long a reflection waits for the version its trace names to reach this stage's view of the playbook."""


class TraceRejected(CombeeError, ValueError):
    """A trace message that cannot be used, with the reason a person can act on."""


def decode_trace(raw: bytes | None) -> Trace:
    """Validate raw bytes as a Trace; raises :class:`TraceRejected` saying exactly what is wrong."""
    if raw is None:
        raise TraceRejected("empty message (no value)")
    if len(raw) > limits.MAX_MESSAGE_BYTES:
        raise TraceRejected(f"message is {len(raw)} bytes, over the limit of {limits.MAX_MESSAGE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceRejected(f"not valid UTF-8: {error.reason} at byte {error.start}") from error
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise TraceRejected(f"invalid JSON: {error}") from error
    if not isinstance(data, dict):
        raise TraceRejected(f"a trace must be a JSON object, got {type(data).__name__}")
    try:
        return Trace.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in error.errors()[:10]
        )
        raise TraceRejected(f"does not match the Trace schema v1: {problems}") from error


class ReflectorStage(Stage):
    spec = REFLECT

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.backlog = BacklogWatch(self)
        self.playbooks = PlaybookVersions(self, on_version=self.backlog.on_version)
        self.fetches = OrderedFetches(self, self.in_flight_limit, name="reflect")
        self._said_inherited: set[str] = set()
        """Playbooks whose traces were said (once) to use inherited entries this stage does not learn from."""

    async def prepare(self) -> None:
        await self.playbooks.start()

    async def tick(self, now: float) -> None:
        await self.backlog.tick(time.time())

    async def used_entries(self, trace: Trace) -> str | None:
        """The entries the agent used, as they read in the version it ran with (``None`` when it used none)."""
        used = trace.metadata.get("used_entries")
        if trace.playbook_id not in self._said_inherited and (inherited := inherited_used(trace)):
            self._said_inherited.add(trace.playbook_id)
            log.info("%s: trace %s used %d entries inherited from a parent (%s): they are not learned from here, only "
                     "their own playbook's are (counted in inherited_entries_not_learned; said once per playbook)",
                     trace.playbook_id, trace.trace_id, len(inherited), ", ".join(inherited[:3]))
        if not self.settings.llm_context or not used:
            return None
        playbook = await self.playbooks.at(trace.playbook_id, trace.playbook_version, CONTEXT_WAIT_S)
        return used_entries_text(playbook, used)

    def in_flight_limit(self) -> int:
        """Two calls per concurrency slot (the reflector's current, adaptive limit) in flight: a trace's reflection
        is published (and committed) within about two call latencies, so progress is steady and a rebalance
        discards little (a fetch of 500 took ~20 s)."""
        llm = self.ctx.llm
        return 2 * (llm.concurrency("reflector") if llm is not None else self.settings.llm_concurrency)

    def fetch_limit(self) -> int:
        return self.fetches.room()

    def decode(self, raw: bytes | None) -> Trace:
        """The strictest reading, then redaction: the one place a trace enters the pipeline (docs/redaction.md)."""
        return redact_trace_counted(self.ctx.redaction, self.ctx.count, self.name, decode_trace(raw))

    def unreadable_reason(self, error: Exception) -> str:
        if isinstance(error, TraceRejected):
            return str(error)  # decode_trace says exactly what is wrong
        return super().unreadable_reason(error)

    async def handle_many(self, deliveries: list[Delivery]) -> None:
        """Start the fetch's calls and return (the consume loop takes the next fetch meanwhile); its reflections
        are published after the previous fetch's."""
        assert self.ctx.llm is not None, "the reflector needs LLM roles"
        admitted, effects = self.backlog.admit(deliveries)
        work = reflect_all([(d.value, d.record) for d in admitted], self.ctx.roles.reflect, self.used_entries)

        async def publish(answered: list[tuple[object, list[Effect]]], latest: bool) -> None:
            drained = await self._drained({d.partition for d in admitted}) if latest else set()
            if self.fetches.in_flight > len(deliveries):  # a fetch was taken while asking
                drained = set()
            done = list(effects)
            last_of: dict[TopicPartition, int] = {}
            for delivery, (_, outcome) in zip(admitted, answered, strict=True):
                if self.owns(delivery.partition):  # else revoked during the calls: the next owner reflects it again
                    for effect in outcome:
                        if isinstance(effect, Publish) and delivery.partition in drained:
                            last_of[delivery.partition] = len(done)
                        done.append(effect)
                    if any(isinstance(effect, Reject) for effect in outcome):  # a dead letter: no longer waited for
                        self.backlog.on_version(delivery.value.playbook_id, [delivery.value.trace_id])
            for index in last_of.values():  # no trace of its partition was waiting when this one went out
                done[index] = replace(cast(Publish, done[index]), headers=((UPSTREAM_DRAINED, b"1"),))
            await perform(self, [*done, *acknowledge([d.record for d in deliveries])])

        await self.fetches.submit(len(deliveries), work, publish)

    async def drain(self) -> None:
        await self.fetches.wait()

    async def _drained(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        """Of these partitions, those with no trace left to reflect: read to their high watermark (the caller's fetch
        is the latest, so none is in flight after it). The last reflection of each gets ``UPSTREAM_DRAINED``: the
        batcher may then close an idle batch at its stream's pace (``combee_core.batch.batching.idle_after``)."""
        consumer, drained = self.consumer, set()
        for tp in partitions & self.held_by_client():
            assert consumer is not None
            highwater = consumer.highwater(tp)
            try:
                if highwater is not None and await consumer.position(tp) >= highwater:
                    drained.add(tp)
            except IllegalStateError:  # dropped by the client meanwhile: its release follows
                continue
        return drained

