"""LLM call records: one attempt of one call, as the ``llm-calls`` topic and replay hold it.

Unlike the stages' messages, a call record is not strict about types (it is written by our own LLM layer and read
back by replay); like them, it forbids unknown fields and carries ``schema_version``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from combee_core.models.base import SCHEMA_VERSION, Usage

Role = Literal["reflector", "aggregator", "reducer", "agent", "judge"]
"""The learning roles, and the LLM judge evaluator's two (combee_core.judge: its agent run and its verdict)."""


class CallRecord(BaseModel):
    """One attempt of one LLM call: what was asked, what came back, what it cost. Replay keys on ``key``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    role: Role
    model: str
    key: str = Field(description="sha256 of model + messages + params (sorted-key JSON); same for every attempt.")
    messages: list[dict[str, Any]]
    params: dict[str, Any] = Field(description="Parameters that shape the answer (not timeout, api_base or key).")
    response_text: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = Field(default=0.0, ge=0, description="Modelled latency in virtual mode, wall time otherwise.")
    modelled_latency_s: float | None = Field(default=None, description="The simulator's scaled latency, if any.")
    items_read: int = Field(ge=0)
    attempt: int = Field(ge=1)
    dropped_items: int = Field(default=0, ge=0, description="Invalid items dropped from the output.")
    repaired: bool = False
    error: str | None = None
