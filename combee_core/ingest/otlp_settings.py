"""The settings of OpenTelemetry ingest: the ``ingest-otlp`` stage and ``combee otlp-receiver`` (part of
:class:`combee_core.settings.CombeeSettings`, set from ``COMBEE_OTLP_*`` like every setting)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OtlpSettings(BaseModel):
    """The OTLP doors' fields of :class:`~combee_core.settings.CombeeSettings`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    otlp_ingest: bool = Field(
        default=False, description="Run the ingest-otlp stage: read OpenTelemetry spans (OTLP, as the Collector's "
        "Kafka exporter or `combee otlp-receiver` writes them) from otlp_topic and publish one trace per run.",
    )
    otlp_topic: str = Field(
        default="otlp_spans", pattern=r"^[A-Za-z0-9._-]+$", description="Full name (no prefix) of the OTLP topic "
        "ingest-otlp reads and `combee otlp-receiver` writes (the Collector's Kafka exporter's default).",
    )
    otlp_group_by: Literal["trace", "conversation"] = Field(
        default="trace", description="One trace per OTel trace id, or per gen_ai.conversation.id when a span has one."
    )
    otlp_idle_s: float = Field(
        default=5.0, gt=0, description="A run whose root span never arrives is taken as finished this long after "
        "its last span."
    )
    otlp_feedback_wait_s: float = Field(
        default=300.0, ge=0, description="How long a finished run without an evaluation (a gen_ai.evaluation.result "
        "event, OpenInference evaluations.N.evaluation.* attributes) waits for one; then it goes on without it "
        "(metadata otlp.feedback says so)."
    )
    otlp_window_s: float = Field(
        default=900.0, gt=0, description="Longest a run is held from its first span, whatever it waits for."
    )
    otlp_max_pending: int = Field(
        default=10_000, ge=1, description="Most runs held at once; beyond it the oldest goes on early (counted)."
    )
    otlp_default_playbook: str | None = Field(
        default=None, description="Playbook of runs whose spans carry no combee.playbook.id (none: dead letter)."
    )
    otlp_receiver_host: str = Field(default="127.0.0.1", description="Address `combee otlp-receiver` binds.")
    otlp_receiver_port: int = Field(default=4318, ge=0, le=65535, description="OTLP/HTTP port (0: any free one).")
    otlp_max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Largest OTLP/HTTP body accepted, after decompression (413)."
    )
    otlp_max_inflight: int = Field(
        default=32, ge=1, description="Requests the receiver handles at once; more are answered 429 with Retry-After."
    )
    otlp_require_ingest: bool = Field(
        default=True, description="The receiver answers 503 with Retry-After while its run's ingest-otlp consumer "
        "group has no member (nothing would turn the spans into traces); off: it writes them to the topic anyway."
    )
    otlp_max_lag: int = Field(
        default=10_000, ge=0, description="Records of the OTLP topic the ingest-otlp group may lag behind before the "
        "receiver answers 429 with Retry-After (the pipeline cannot keep up; 0: never)."
    )
