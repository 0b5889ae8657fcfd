"""Where a stage applies redaction (``combee_core.ingest.redaction``) and counts it: traces as the reflector decodes
them, and every dead letter (its reason always; its original when it came from a topic before the ingest point)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from combee_core.ingest.redaction import RedactionConfig, Redactor
from combee_core.models import DeadLetter, Trace
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

BEFORE_INGEST = (Topic.TRACES, Topic.OTLP_SPANS)
"""Topics whose records may hold raw personal data: a dead letter of one of theirs keeps only a redacted original."""

Count = Callable[[str, int], None]


def count_redactions(count: Count, where: str, counts: Mapping[str, int]) -> None:
    """``redactions.<where>.<TYPE>`` counters (``combee_redactions_total{stage, type}``): numbers, never values."""
    for name, amount in counts.items():
        if amount:
            count(f"redactions.{where}.{name}", amount)


def redact_trace_counted(config: RedactionConfig, count: Count, where: str, trace: Trace) -> Trace:
    """The trace redacted, its replacements counted; raises ``RedactionError`` (a ``ValueError``) when it cannot be."""
    redactor = Redactor(config)
    redacted = redactor.trace(trace)
    count_redactions(count, where, redactor.counts)
    return redacted


def redact_dead_letter(config: RedactionConfig, settings: CombeeSettings, count: Count,
                       letter: DeadLetter) -> DeadLetter:
    """The dead letter as it may be published and logged (``Redactor.dead_letter``), its replacements counted."""
    redactor = Redactor(config)
    before_ingest = letter.topic in {settings.topic(topic) for topic in BEFORE_INGEST}
    redacted = redactor.dead_letter(letter, original=before_ingest)
    count_redactions(count, letter.stage, redactor.counts)
    return redacted
