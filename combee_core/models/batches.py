"""The batcher's manifests: which reflections make a batch, dealt how."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from combee_core.models.base import SCHEMA_VERSION, CombeeModel, PlaybookId, Timestamp, Usage


class BatchManifest(CombeeModel):
    """The batcher's record of a closed batch: which reflections, in which order, dealt how."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    batch_id: int = Field(ge=0)
    base_version: int = Field(ge=0)
    context_lag: int = Field(default=0, ge=0, description="The aggregators read version max(0, base_version - "
                             "context_lag) as context (the setting context_lag when the batch closed; 0 in batches "
                             "recorded before it existed). Replays and re-sends keep it.")
    trace_ids: list[str] = Field(description="Traces of the batch, in batch order.")
    reflection_ids: list[str]
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    p: int = Field(ge=1)
    seed: int
    subgroup_sizes: list[int]
    target_batch_size: int = Field(ge=1)
    closed_by: Literal["size", "max_wait", "idle"] = Field(description="size: it reached its target; max_wait: "
                                                          "max_wait_s passed; idle: batch_idle_s without a new "
                                                          "reflection")
    closed_at: Timestamp
    trace_digests: list[str | None] | None = Field(
        default=None, description="Trace.digest() of each trace, in batch order, when the reflections carried them."
    )
    reflection_usage: Usage | None = Field(
        default=None, description="What the batch's reflections cost (the reflector's calls): the promoter counts it "
        "in the cost per improvement point."
    )
