"""Reflections (the reflector's lessons from one trace) and their shuffled copies."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from combee_core import limits
from combee_core.models.base import (
    SCHEMA_VERSION,
    CombeeModel,
    EntryId,
    Identifier,
    InsightText,
    PlaybookId,
    SectionName,
    TagValue,
    Timestamp,
    Usage,
)


class Insight(CombeeModel):
    """A lesson drawn from a trace, destined for one playbook section."""

    section: SectionName
    content: InsightText


class EntryTag(CombeeModel):
    """A verdict on an existing playbook entry: did it help or harm this run?"""

    entry_id: EntryId
    tag: TagValue


class TraceOutcome(CombeeModel):
    """How one trace went and which of its playbook's entries its agent used: what outcome credit counts
    (``combee_core.playbook.outcomes``). Taken from the trace, never from a model's answer."""

    trace_id: Identifier
    ran_version: int = Field(ge=0, description="The playbook version the agent ran (the trace's playbook_version).")
    success: int = Field(ge=0, le=1000, description="Thousandths of a success: 1000 or 0 from the trace's success, "
                         "else its score in [0, 1] times 1000, rounded.")
    used: list[EntryId] = Field(default_factory=list, description="Its own playbook's entries the agent used "
                                "(metadata.used_entries), sorted, without repeats.")


class Reflection(CombeeModel):
    """The reflector's output for one trace."""

    schema_version: Literal[1] = SCHEMA_VERSION
    reflection_id: Identifier
    trace_id: Identifier
    playbook_id: PlaybookId
    seen_version: int = Field(ge=0)
    insights: Annotated[list[Insight], Field(max_length=limits.MAX_INSIGHTS_PER_REFLECTION)]
    entry_tags: Annotated[list[EntryTag], Field(max_length=limits.MAX_TAGS_PER_REFLECTION)] = Field(
        default_factory=list
    )
    model: str
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = Field(default=0.0, ge=0.0)
    trace_digest: str | None = Field(
        default=None, description="Trace.digest() of the trace reflected on: a second trace under the same trace_id "
        "with another digest is a conflict (dead letter), not a resend."
    )
    outcome: TraceOutcome | None = Field(
        default=None, description="The trace's outcome and the entries its agent used (None: the trace states no "
        "success and no score in [0, 1])."
    )


class ShuffledReflection(CombeeModel):
    """One of the p copies of a reflection, dealt to a subgroup of a batch by the augmented shuffle."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    batch_id: int = Field(ge=0)
    subgroup: int = Field(ge=0)
    replica: int = Field(ge=0)
    expected_count: int = Field(ge=1, description="Number of copies the subgroup's window should receive.")
    k: int = Field(ge=1, description="Number of subgroups in this batch.")
    p: int = Field(ge=1, description="Copies made of every reflection.")
    batch_size: int = Field(ge=1, description="Number of distinct reflections in the batch.")
    base_version: int = Field(ge=0, description="Playbook version the batch will be applied to.")
    context_lag: int = Field(default=0, ge=0, description="The aggregators read version max(0, base_version - "
                             "context_lag) as context (the setting context_lag when the batch closed; 0 in batches "
                             "recorded before it existed). Replays and re-sends keep it.")
    position: int = Field(ge=0, description="Order of this copy inside its subgroup (set by the seeded shuffle).")
    batch_closed_at: Timestamp = Field(description="When the batcher closed the batch (delay measurement).")
    reflection: Reflection

    @property
    def copy_id(self) -> str:
        """Stable identity of this copy (dedupe key for redeliveries)."""
        return f"{self.reflection.reflection_id}#{self.replica}"
