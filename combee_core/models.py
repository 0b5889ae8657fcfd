"""Typed messages exchanged between the stages (one model per topic).

Every model carries ``schema_version`` so consumers can refuse what they do not understand. Free-text
fields have size limits; a value over a limit is rejected by pydantic with a message naming the field
and the limit (the stream turns that into a dead letter). Validation is strict, as the published JSON Schemas are:
no ``"3"`` or ``true`` for an integer, no ``"yes"`` or ``1`` for a boolean, no number for a string; a date-time is an
ISO 8601 string (or a ``datetime`` in Python), never a number.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal, Self

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from combee_core import limits

SCHEMA_VERSION: Final = 1

Identifier = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_ID_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]*$"),
]
PlaybookId = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_PLAYBOOK_ID_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
SectionName = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_SECTION_CHARS, pattern=r"^[a-z0-9][a-z0-9_-]*$")
]
EntryId = Annotated[str, Field(min_length=1, max_length=limits.MAX_ID_CHARS)]
InsightText = Annotated[str, Field(min_length=1, max_length=limits.MAX_INSIGHT_CHARS)]
TagValue = Literal["helpful", "harmful", "neutral"]


def _iso_datetime_only(value: Any) -> Any:
    """Let only ISO 8601 strings (and ``datetime`` objects) through to datetime parsing: not Unix times."""
    if isinstance(value, (str, datetime)):
        return value
    raise ValueError(f"a date-time must be an ISO 8601 string, got {type(value).__name__}")


Timestamp = Annotated[datetime, Field(strict=False), BeforeValidator(_iso_datetime_only)]
"""A date-time field: strict models refuse strings for ``datetime``, but on the wire it is an ISO 8601 string."""


def first_error(error: ValidationError) -> str:
    """The first problem of a validation error, as ``field.path: message`` (``<root>`` for the value itself)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "<root>"
    return f"{where}: {first['msg']}"


def _base64_length(size: int) -> int:
    """Characters of the base64 encoding of ``size`` bytes."""
    return 4 * ((size + 2) // 3)


def utc_now() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class CombeeModel(BaseModel):
    """Base for every wire model: strict about types and unknown fields, frozen, JSON via orjson."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def to_json_bytes(self) -> bytes:
        """Serialise to compact JSON bytes (the wire format)."""
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_json_bytes(cls, data: bytes | str | None) -> Self:
        """Parse and validate wire bytes. Every bad input raises a ``ValueError``: ``pydantic.ValidationError``,
        ``orjson.JSONDecodeError``, or a plain ``ValueError`` for a record without a value (a tombstone)."""
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise ValueError(f"no JSON to read: the record's value is {type(data).__name__}")
        return cls.model_validate(orjson.loads(data))


class Usage(CombeeModel):
    """Token usage and cost of one or more LLM calls."""

    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    calls: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 12),
            calls=self.calls + other.calls,
        )


# ---------------------------------------------------------------------------------------------- traces


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


# ---------------------------------------------------------------------------------------------- reflections


class Insight(CombeeModel):
    """A lesson drawn from a trace, destined for one playbook section."""

    section: SectionName
    content: InsightText


class EntryTag(CombeeModel):
    """A verdict on an existing playbook entry: did it help or harm this run?"""

    entry_id: EntryId
    tag: TagValue


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
    position: int = Field(ge=0, description="Order of this copy inside its subgroup (set by the seeded shuffle).")
    batch_closed_at: Timestamp = Field(description="When the batcher closed the batch (delay measurement).")
    reflection: Reflection

    @property
    def copy_id(self) -> str:
        """Stable identity of this copy (dedupe key for redeliveries)."""
        return f"{self.reflection.reflection_id}#{self.replica}"


# ---------------------------------------------------------------------------------------------- operations


class AddOp(CombeeModel):
    """Add a new entry to a section."""

    op: Literal["ADD"] = "ADD"
    section: SectionName
    content: InsightText
    support: int = Field(default=1, ge=1, description="How many reflection copies backed this insight.")


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


# ---------------------------------------------------------------------------------------------- batches


class BatchManifest(CombeeModel):
    """The batcher's record of a closed batch: which reflections, in which order, dealt how."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    batch_id: int = Field(ge=0)
    base_version: int = Field(ge=0)
    trace_ids: list[str] = Field(description="Traces of the batch, in batch order.")
    reflection_ids: list[str]
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    p: int = Field(ge=1)
    seed: int
    subgroup_sizes: list[int]
    target_batch_size: int = Field(ge=1)
    closed_by: Literal["size", "max_wait"]
    closed_at: Timestamp
    trace_digests: list[str | None] | None = Field(
        default=None, description="Trace.digest() of each trace, in batch order, when the reflections carried them."
    )
    reflection_usage: Usage | None = Field(
        default=None, description="What the batch's reflections cost (the reflector's calls): the promoter counts it "
        "in the cost per improvement point."
    )


# ---------------------------------------------------------------------------------------------- versions


class PlaybookEntry(CombeeModel):
    """One line of the playbook."""

    entry_id: EntryId
    section: SectionName
    content: InsightText
    helpful: int = Field(default=0, ge=0)
    harmful: int = Field(default=0, ge=0)
    created_version: int = Field(ge=0)
    updated_version: int = Field(ge=0)


class VersionStats(CombeeModel):
    """Measurements of how a version was made. Timing fields are excluded from the content hash."""

    batch_size: int = Field(ge=0)
    k: int = Field(ge=0)
    p: int = Field(ge=0)
    levels: int = Field(default=1, ge=0)
    llm_calls: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    missing_copies: int = Field(default=0, ge=0)
    max_staleness: int = Field(default=0, ge=0, description="Largest (base_version - trace.playbook_version).")
    delay_s: float = Field(default=0.0, ge=0.0, description="Batch closed -> version published, wall seconds.")
    llm_critical_path_s: float = Field(
        default=0.0, ge=0.0,
        description="Sum over scan levels of the slowest LLM call (modelled latency in virtual time).",
    )
    playbook_tokens: int = Field(default=0, ge=0)
    merged_without_call: int = Field(default=0, ge=0, description="Scan groups whose partials did not conflict and "
                                     "were merged deterministically instead of by a reducer call.")


class PlaybookVersion(CombeeModel):
    """A published playbook version: the whole playbook, what changed, and where it came from."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    version: int = Field(ge=1)
    parent_version: int = Field(ge=0)
    batch_id: int = Field(ge=0)
    entries: list[PlaybookEntry]
    next_entry_number: int = Field(ge=1, description="Entry-id counter after this version (ids are never reused).")
    operations: list[AppliedOperation]
    lineage: list[str] = Field(description="Sorted trace_ids whose reflections made this version.")
    stats: VersionStats
    content_hash: str = Field(description="sha256 of the deterministic fields (all but stats timing).")
    published_at: Timestamp

    @staticmethod
    def compute_hash(
        playbook_id: str,
        version: int,
        parent_version: int,
        batch_id: int,
        entries: list[PlaybookEntry],
        operations: list[AppliedOperation],
        lineage: list[str],
    ) -> str:
        """Hash of everything a reproducible rerun must reproduce byte for byte."""
        payload = {
            "playbook_id": playbook_id,
            "version": version,
            "parent_version": parent_version,
            "batch_id": batch_id,
            "entries": [e.model_dump(mode="json") for e in entries],
            "operations": [o.model_dump(mode="json") for o in operations],
            "lineage": lineage,
        }
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


# ---------------------------------------------------------------------------------------------- control


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


# ---------------------------------------------------------------------------------------------- dead letters


class DeadLetter(CombeeModel):
    """A message a stage could not process, kept with the reason instead of being dropped.

    Bounded whatever the input: only the first 64 KiB of the original are kept, with its full size and sha256, and
    every text field is capped, so a dead letter serialises to less than 512 KiB and can always be produced.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    stage: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)]
    reason: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_REASON_CHARS)]
    error_type: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)]
    original_text: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_ORIGINAL_BYTES)] | None = Field(
        default=None, description="The original bytes (at most the first 64 KiB) when they are valid UTF-8."
    )
    original_base64: Annotated[str, Field(max_length=_base64_length(limits.MAX_DEAD_LETTER_ORIGINAL_BYTES))] | None = (
        Field(default=None, description="The original bytes (at most the first 64 KiB) otherwise.")
    )
    original_size: int = Field(ge=0, description="Size of the whole original message, in bytes.")
    original_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        default=None, description="sha256 (hex) of the whole original message, kept or not."
    )
    truncated: bool = Field(default=False, description="True when only the first bytes of the original are kept.")
    topic: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_NAME_CHARS)] | None = None
    partition: int | None = None
    offset: int | None = None
    key: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_KEY_CHARS)] | None = None
    trace_id: Annotated[str, Field(max_length=limits.MAX_ID_CHARS)] | None = Field(
        default=None, description="The record's trace_id when it had a readable one, even if the record was invalid."
    )
    playbook_id: Annotated[str, Field(max_length=limits.MAX_PLAYBOOK_ID_CHARS)] | None = Field(
        default=None, description="The record's playbook_id when it had a readable one."
    )
    occurred_at: Timestamp


class ViewCheckpoint(CombeeModel):
    """Where a stage's live view of a state topic can resume instead of reading it from the beginning.

    Replaying the topic from ``position`` with the number gates at ``nexts`` (and, for the playbook view, the
    latest version records at ``latest``) rebuilds the same state as a read from offset 0. Written every
    ``view_checkpoint_every`` records by any replica (the same log prefix gives the same checkpoint)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    view: str = Field(description="<stage>/<logical topic>, e.g. batch/batches")
    position: int = Field(ge=0, description="Offset to resume reading from.")
    nexts: dict[str, int] = Field(description="Per playbook, the number the next valid record must carry there.")
    latest: dict[str, int] = Field(default_factory=dict, description="Per playbook, offset of the record to load "
                                   "before resuming (the playbook view: the latest valid version).")
    written_at: Timestamp


# ---------------------------------------------------------------------------------------------- promotion


def entries_digest(entries: list[PlaybookEntry]) -> str:
    """sha256 of what an agent reads of a playbook: each entry's section and content, in order (not ids, counters or
    the version number). Two versions with the same text share it, so evaluation results are cached by it."""
    payload = [[entry.section, entry.content] for entry in entries]
    return hashlib.sha256(orjson.dumps(payload)).hexdigest()


class EvalRequest(CombeeModel):
    """Score one playbook (as an agent reads it) on one held-out task. Answered by an :class:`EvalResult`."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: Identifier = Field(description="<playbook_id>/<digest[:16]>/<task_id>: the same pair is one request.")
    playbook_id: PlaybookId
    version: int = Field(ge=0, description="A version with this content (0 = the empty playbook).")
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="entries_digest(entries): the cache key with task_id.")
    task_set: Identifier = Field(description="The pinned held-out set the task belongs to, e.g. suite-7/held-out.")
    task_id: Identifier
    task_input: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)] = ""
    entries: list[PlaybookEntry]
    requested_at: Timestamp


class EvalResult(CombeeModel):
    """An evaluator's score for one (playbook content, task)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: Identifier
    playbook_id: PlaybookId
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    task_id: Identifier
    score: float | None = Field(default=None, ge=0.0, le=1.0, description="None when the evaluation failed.")
    error: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_REASON_CHARS)] = ""
    evaluator: Identifier = Field(description="Which evaluator answered (e.g. combee-builtin, node-example).")
    evaluator_model: str = Field(description="The model that judged, or the simulator that stood in for one.")
    evaluated_at: Timestamp


class ProposerModels(CombeeModel):
    """The models that proposed a candidate (named apart from the evaluator's)."""

    reflector: str
    aggregator: str
    reducer: str


class ImprovementCost(CombeeModel):
    """What the candidates since the incumbent cost (rejected ones included), per held-out point gained.

    From each candidate's ``VersionStats`` (its traces, the aggregator and reducer calls that built it) and its
    batch's ``BatchManifest.reflection_usage`` (the reflector's calls), when the manifest carries it."""

    candidates: int = Field(ge=0)
    traces: int = Field(ge=0)
    llm_calls: int = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cost_usd: float = Field(ge=0.0)
    gain_points: float = Field(description="(held-out score - incumbent score) x 100.")
    cost_usd_per_point: float | None = Field(default=None, description="None unless the gain is positive.")
    traces_per_point: float | None = None
    tokens_per_point: float | None = None


class PromotionDecision(CombeeModel):
    """One record of the ``promoted`` topic: a decision on a candidate, or an operator's promote / rollback. Its
    ``served`` field is the pointer: the version every follower of promoted versions runs from now on."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    decision_id: int = Field(ge=0, description="0, 1, 2, ... per playbook; the first record of each id counts.")
    action: Literal["promote", "reject", "hold", "canary", "operator-promote", "rollback"]
    candidate_version: int | None = Field(default=None, ge=1, description="The candidate decided on (None for an "
                                          "operator's rollback).")
    candidate_hash: str | None = None
    served_version: int = Field(ge=0, description="The pointer after this decision (0 = the empty playbook).")
    served: PlaybookVersion | None = Field(description="The served version in full (None for version 0).")
    previous_version: int = Field(ge=0, description="The served version before this decision.")
    held_out_score: float | None = None
    incumbent_score: float | None = None
    task_set: str = ""
    tasks: int = Field(default=0, ge=0, description="Held-out tasks behind each score.")
    rule: str = Field(description="The promotion rule as configured, e.g. held_out >= incumbent - 0.01.")
    reason: str
    paused: bool = Field(default=False, description="Automatic promotion paused (after a rollback) until an operator "
                         "promotes a version.")
    canary: PlaybookVersion | None = Field(default=None, description="With action canary: the candidate that the "
                                           "canary share of agents runs meanwhile (the others run served).")
    canary_share: float | None = Field(default=None, ge=0.0, le=1.0, description="Share of agents in the canary "
                                       "(an agent is in it when unit_hash(agent_id) < share).")
    canary_score: float | None = Field(default=None, description="Mean live score of the canary's traces.")
    canary_incumbent_score: float | None = Field(default=None, description="Mean live score of the incumbent's "
                                                 "traces during the canary.")
    canary_traces: int = Field(default=0, ge=0, description="Live traces behind each canary score.")
    proposer: ProposerModels | None = None
    evaluator_model: str | None = None
    cost: ImprovementCost | None = None
    by: str = Field(description="promoter, or the operator (user@host) for promote / rollback.")
    decided_at: Timestamp

    def decision_hash(self) -> str:
        """sha256 of every field but the time: what a replay must reproduce byte for byte."""
        payload = self.model_dump(mode="json", exclude={"decided_at"})
        if payload.get("served"):
            payload["served"].pop("published_at", None)
            payload["served"].pop("stats", None)
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


WIRE_MODELS: dict[str, type[CombeeModel]] = {
    "trace": Trace,
    "reflection": Reflection,
    "shuffled_reflection": ShuffledReflection,
    "partial_update": PartialUpdate,
    "batch_manifest": BatchManifest,
    "playbook_version": PlaybookVersion,
    "batch_metrics": BatchMetrics,
    "control_decision": ControlDecision,
    "dead_letter": DeadLetter,
    "view_checkpoint": ViewCheckpoint,
    "eval_request": EvalRequest,
    "eval_result": EvalResult,
    "promotion_decision": PromotionDecision,
}


def dump_json(value: Any) -> bytes:
    """orjson dump used by the whole project (sorted keys for stable bytes)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
