"""What a rendering is, and the trace that reports a run of it (pure: no Kafka, no clock but the one passed in)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from combee_core import limits
from combee_core.models import Trace, TraceStep
from combee_core.models.traces import MetadataValue

USED_ENTRIES = "used_entries"
"""The trace metadata key the reflector reads (comma-separated entry ids: docs/protocol.md)."""
USED_ENTRIES_OMITTED = "used_entries_omitted"
"""How many used entry ids did not fit ``metadata.used_entries`` (2,048 characters): said, never dropped silently."""


@dataclass(frozen=True)
class Rendering:
    """The playbook text given to one task, and what a report of its run needs: the version and the entries."""

    playbook_id: str
    version: int
    task: str
    text: str
    tokens: int
    entry_ids: tuple[str, ...]
    """The entries in ``text`` (playbook order): the run's ``used_entries``."""

    def span_attributes(self, task_id: str | None = None) -> dict[str, str | int]:
        """The OpenTelemetry span attributes that make an instrumented run's trace carry this rendering
        (``combee otlp-receiver`` / stage ``ingest-otlp`` read them: docs/protocol.md, "OpenTelemetry")."""
        attributes: dict[str, str | int] = {"combee.playbook.id": self.playbook_id,
                                            "combee.playbook.version": self.version,
                                            "combee.used_entries": ",".join(self.entry_ids)}
        if task_id is not None:
            attributes["combee.task.id"] = task_id
        return attributes


def task_id_of(task: str) -> str:
    """A task's default id: ``task-`` and 16 hex digits of its text's sha256 (the same text, the same id)."""
    return "task-" + hashlib.sha256(task.encode()).hexdigest()[:16]


def default_agent_id(host: str, pid: int) -> str:
    """``<host>-<pid>`` made a valid identifier."""
    cleaned = re.sub(r"[^A-Za-z0-9._:@/-]", "-", f"{host}-{pid}").lstrip("._:@/-")
    return cleaned[: limits.MAX_ID_CHARS] or f"agent-{pid}"


def used_entries_metadata(entry_ids: Sequence[str]) -> dict[str, MetadataValue]:
    """``used_entries`` as comma-separated ids within the metadata value limit; ids that do not fit are counted in
    ``used_entries_omitted`` (the reflector then tags only the listed ones)."""
    kept: list[str] = []
    length = 0
    for entry_id in entry_ids:
        extra = len(entry_id) + (1 if kept else 0)
        if length + extra > limits.MAX_METADATA_VALUE_CHARS:
            break
        kept.append(entry_id)
        length += extra
    metadata: dict[str, MetadataValue] = {USED_ENTRIES: ",".join(kept)} if kept else {}
    if len(kept) < len(entry_ids):
        metadata[USED_ENTRIES_OMITTED] = len(entry_ids) - len(kept)
    return metadata


def run_trace(*, playbook_id: str, agent_id: str, rendering: Rendering | None, task: str, output: str,
              created_at: datetime, version: int = 0, score: float | None = None, success: bool | None = None,
              feedback: str = "", task_id: str | None = None, trace_id: str | None = None, input: str | None = None,
              steps: Sequence[TraceStep] = (), metadata: Mapping[str, MetadataValue] | None = None) -> Trace:
    """The trace reporting one run. With a ``rendering`` (the playbook text the run was given), its version is the
    trace's ``playbook_version`` and its entries are ``metadata.used_entries``; without one, ``version`` (0: the
    run had no playbook) and no used entries. ``input`` defaults to the task; ``task_id`` to :func:`task_id_of`;
    ``trace_id`` to a random one. ``metadata`` may not set ``used_entries`` (the rendering says it)."""
    given = dict(metadata or {})
    if USED_ENTRIES in given or USED_ENTRIES_OMITTED in given:
        raise ValueError(f"metadata.{USED_ENTRIES} is filled in from the rendering; do not pass it")
    used = used_entries_metadata(rendering.entry_ids) if rendering is not None else {}
    return Trace(
        trace_id=trace_id or f"{agent_id}:{uuid.uuid4().hex}"[-limits.MAX_ID_CHARS:].lstrip("._:@/-"),
        playbook_id=playbook_id,
        playbook_version=rendering.version if rendering is not None else version,
        agent_id=agent_id,
        task_id=task_id or task_id_of(task),
        input=task if input is None else input,
        output=output,
        feedback=feedback,
        score=score,
        success=success,
        steps=list(steps),
        metadata={**given, **used},
        created_at=created_at,
    )
