"""The controller's input (per-version metrics) and output (batch-size decisions)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from combee_core.models.base import SCHEMA_VERSION, CombeeModel, PlaybookId, Timestamp, Usage


class BatchMetrics(CombeeModel):
    """Published by the reducer for every version: the controller's input."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    batch_id: int = Field(ge=0)
    version: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    k: int = Field(ge=1)
    delay_s: float = Field(ge=0.0, description="Batch closed -> version published.")
    llm_critical_path_s: float = Field(default=0.0, ge=0.0)
    llm_calls: int = Field(ge=0)
    usage: Usage = Field(default_factory=Usage)
    round_s: float | None = Field(
        default=None, ge=0.0, description="Previous version published -> this version published (wall seconds): a "
        "sync fleet's round time. None for the first version its reducer published since it started.")
    batch_closed_at: Timestamp | None = Field(
        default=None, description="When the batcher closed the batch: the streaming controller's arrival rate.")


class DelaySample(CombeeModel):
    """One measured (batch size, delay) pair."""

    batch_size: int = Field(ge=1)
    delay_s: float = Field(ge=0.0)
    rollout_s: float = Field(default=0.0, ge=0.0, description="The part of delay_s that was the fleet's rollouts "
                             "(sync fleets; 0 otherwise).")


class ControlDecision(CombeeModel):
    """The controller's choice of batch size for a playbook, with the fit behind it."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    decision_id: int = Field(ge=0, description="Increasing per playbook.")
    batch_size: int = Field(ge=1)
    phase: Literal["fixed", "profiling", "fitted"]
    fit_A: float | None = None
    fit_alpha: float | None = None
    r2: float | None = None
    tau: float
    samples: list[DelaySample] = Field(default_factory=list)
    reason: str
    decided_at: Timestamp
    clock: str | None = Field(default=None, description="What the samples' delays measure (e.g. the sync round time "
                              "on the modelled clock).")
    plateau_batch_size: float | None = Field(default=None, description="bs*: the smallest size within [bs_min, "
                                             "bs_max] whose modelled per-trace delay is within tau of the lowest.")
    bs_min: int | None = Field(default=None, ge=1)
    bs_max: int | None = Field(default=None, ge=1, description="The upper bound (against quality risk).")
    best_batch_size: int | None = Field(default=None, ge=1, description="The size with the lowest modelled (or, "
                                        "without a fit, measured) per-trace delay within [bs_min, bs_max].")
    rollout_task_s: float | None = Field(default=None, ge=0.0, description="Seconds of one wave of rollouts, as "
                                         "measured (sync fleets): the closed-form part of the round model.")
    fleet_agents: int | None = Field(default=None, ge=1, description="Parallel agents of the sync fleet (a round of "
                                     "n tasks is ceil(n / agents) waves); none: one agent per task.")
