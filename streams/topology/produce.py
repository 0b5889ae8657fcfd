"""Publishing traces: validate first (line numbers for every problem), then send keyed by playbook."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from combee_core.ingest.redaction import RedactionConfig, redact_trace
from combee_core.models import Trace
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import start_producer
from streams.topology.stages.reflect import TraceRejected, decode_trace


@dataclass(frozen=True)
class LineError:
    line: int
    reason: str


@dataclass
class LoadedTraces:
    traces: list[Trace] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)


def load_traces(lines: Iterable[str] | TextIO) -> LoadedTraces:
    """Validate JSONL lines as traces; blank lines are skipped, each bad line is reported with its number."""
    loaded = LoadedTraces()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            loaded.traces.append(decode_trace(line.encode("utf-8")))
        except TraceRejected as error:
            loaded.errors.append(LineError(number, str(error)))
    return loaded


async def produce_traces(
    settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, traces: Sequence[Trace]
) -> int:
    """Send traces to the run's traces topic, keyed by playbook_id, in order; returns how many were sent."""
    producer = await start_producer(bootstrap, profile)
    try:
        await send_traces(producer, settings, traces)
    finally:
        await producer.stop()
    return len(traces)


async def send_traces(producer, settings: CombeeSettings, traces: Sequence[Trace]) -> None:
    """Send with an already started producer and wait until every trace is acknowledged; redacted first with
    ``redact_before_produce`` (raw traces never reach the topic)."""
    topic = settings.topic(Topic.TRACES)
    if settings.redact and settings.redact_before_produce:
        config = RedactionConfig.from_settings(settings)
        traces = [redact_trace(trace, config)[0] for trace in traces]
    for trace in traces:
        await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode(),
                            headers=[("schema_version", b"1")])
    await producer.flush()
