"""Playbook operations, and the partial updates (lists of them) the aggregators propose."""

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
from combee_core.models.reflections import TraceOutcome


class AddOp(CombeeModel):
    """Add a new entry to a section."""

    op: Literal["ADD"] = "ADD"
    section: SectionName
    content: InsightText
    support: int = Field(default=1, ge=1, description="How many reflection copies backed this insight.")
    distinct_from: Annotated[list[EntryId], Field(max_length=32)] = Field(
        default_factory=list, exclude=True, description="Entries the reducer call read and explicitly keeps this "
        "lesson apart from (never serialised: only the root reducer's own call can say so; the version records the "
        "decision in its curation state).")


class UpdateOp(CombeeModel):
    """Replace the content of an existing entry."""

    op: Literal["UPDATE"] = "UPDATE"
    entry_id: EntryId
    content: InsightText


class MergeOp(CombeeModel):
    """Merge several entries into the first one, with new content; the others are removed."""

    op: Literal["MERGE"] = "MERGE"
    entry_ids: Annotated[list[EntryId], Field(min_length=2, max_length=32)]
    content: InsightText


class DeleteOp(CombeeModel):
    """Remove an entry."""

    op: Literal["DELETE"] = "DELETE"
    entry_id: EntryId


class TagOp(CombeeModel):
    """Count a helpful/harmful verdict on an entry."""

    op: Literal["TAG"] = "TAG"
    entry_id: EntryId
    tag: TagValue
    count: int = Field(default=1, ge=1)


Operation = Annotated[AddOp | UpdateOp | MergeOp | DeleteOp | TagOp, Field(discriminator="op")]


class AppliedOperation(CombeeModel):
    """An operation and what became of it when applied to the playbook."""

    operation: Operation
    outcome: Literal["applied", "rejected"]
    reason: str = ""
    entry_id: str | None = Field(default=None, description="Entry created or changed, when applied.")


class UseTag(CombeeModel):
    """One trace's verdict on an entry its agent used (from its reflection's entry tags): evidence of use, counted
    once per trace however many copies or partials carry it."""

    entry_id: EntryId
    tag: Literal["helpful", "harmful"]
    trace_id: Identifier


class PartialUpdate(CombeeModel):
    """An aggregator's (or inner reducer node's) proposal for one subgroup of one batch."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    batch_id: int = Field(ge=0)
    level: int = Field(default=0, ge=0, description="0 = subgroup aggregator; >0 = inner scan node.")
    node: int = Field(ge=0, description="Subgroup index at level 0, node index above.")
    k: int = Field(ge=1)
    base_version: int = Field(ge=0)
    operations: Annotated[list[Operation], Field(max_length=limits.MAX_OPERATIONS_PER_UPDATE)]
    reflection_ids: list[str] = Field(default_factory=list, description="Distinct reflections read (sorted).")
    trace_ids: list[str] = Field(default_factory=list, description="Distinct traces behind them (sorted).")
    use_tags: list[UseTag] = Field(
        default_factory=list, description="The helpful/harmful entry tags of the reflections read, one per (entry, "
        "verdict, trace), sorted: the evidence of use eviction ranks by, taken from the reflections, not from the "
        "model's TAG operations (whose counts the model chooses).")
    outcomes: list[TraceOutcome] = Field(
        default_factory=list, description="The outcomes of the traces read, one per trace, sorted by trace_id: what "
        "outcome credit counts (combee_core.playbook.outcomes).")
    items_read: int = Field(ge=0, description="Items this call read (copies at level 0, partials above).")
    expected_items: int = Field(ge=0)
    missing_items: int = Field(default=0, ge=0, description="Copies that never arrived before the window timeout.")
    closed_by: Literal["complete", "timeout"] = "complete"
    error: str = Field(default="", description="Why the LLM call failed (its copies are dead letters), if it did.")
    model: str = ""
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = Field(default=0.0, ge=0.0)
    batch_closed_at: Timestamp
    max_staleness: int = Field(default=0, ge=0)
