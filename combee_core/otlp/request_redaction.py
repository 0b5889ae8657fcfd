"""Redaction of an OTLP export request in place (``combee otlp-receiver`` with ``redact_before_produce``): every
string of every span, event, link, status, resource and scope goes through the redactor
(``combee_core.ingest.redaction``), except attribute keys (the semantic conventions' names, which the mapping reads).
Bytes values are left as they are.
"""

from __future__ import annotations

from typing import Any

from combee_core.ingest.redaction import Redactor

KEPT = frozenset({"key", "schema_url", "trace_state"})
"""String fields kept: attribute names, and W3C/schema plumbing that is not the run's content."""


def redact_message(message: Any, redactor: Redactor) -> None:
    """Redact the string fields of a protobuf message and of every message in it, in place."""
    for descriptor, value in message.ListFields():
        if descriptor.type == descriptor.TYPE_MESSAGE:
            for item in value if descriptor.is_repeated else (value,):
                redact_message(item, redactor)
        elif descriptor.type == descriptor.TYPE_STRING and descriptor.name not in KEPT:
            if descriptor.is_repeated:
                value[:] = [redactor.text(item) for item in value]
            else:
                setattr(message, descriptor.name, redactor.text(value))
