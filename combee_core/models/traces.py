"""Traces: what an agent publishes on ``traces`` about one run."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import Field, field_validator

from combee_core import limits
from combee_core.models.base import SCHEMA_VERSION, CombeeModel, Identifier, PlaybookId, Timestamp, dump_json


class TraceStep(CombeeModel):
    """One step of an agent run."""

    role: Annotated[str, Field(min_length=1, max_length=64)]
    content: Annotated[str, Field(max_length=limits.MAX_STEP_CHARS)]
    tool: Annotated[str, Field(max_length=128)] | None = None


MetadataValue = str | int | float | bool | None


class Trace(CombeeModel):
    """An agent's execution trace: what it was asked, what it did, and how it went."""

    schema_version: Literal[1] = SCHEMA_VERSION
    trace_id: Identifier = Field(description="Client-made idempotency key: the same trace_id is learned from once.")
    playbook_id: PlaybookId
    playbook_version: int = Field(ge=0, description="Playbook version the agent ran with (0 = empty playbook).")
    agent_id: Identifier
    task_id: Identifier
    input: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)]
    output: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)]
    feedback: Annotated[str, Field(max_length=limits.MAX_FEEDBACK_CHARS)] = ""
    score: float | None = None
    success: bool | None = None
    steps: Annotated[list[TraceStep], Field(max_length=limits.MAX_STEPS)] = Field(default_factory=list)
    metadata: Annotated[dict[str, MetadataValue], Field(max_length=limits.MAX_METADATA_KEYS)] = Field(
        default_factory=dict
    )
    created_at: Timestamp

    @field_validator("metadata")
    @classmethod
    def _metadata_values_bounded(cls, value: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        for key, item in value.items():
            if len(key) > 128:
                raise ValueError(f"metadata key {key[:32]!r}... is longer than 128 characters")
            if isinstance(item, str) and len(item) > limits.MAX_METADATA_VALUE_CHARS:
                raise ValueError(
                    f"metadata[{key!r}] has {len(item)} characters, more than {limits.MAX_METADATA_VALUE_CHARS}"
                )
        return value

    def digest(self) -> str:
        """Short sha256 of the whole trace (sorted-key JSON): tells a resend from another trace under the same id."""
        return hashlib.sha256(dump_json(self.model_dump(mode="json"))).hexdigest()[:16]
