"""Typed messages exchanged between the stages (one model per topic; ``combee_core.topology`` says which).

Every model carries ``schema_version`` so consumers can refuse what they do not understand. Free-text
fields have size limits; a value over a limit is rejected by pydantic with a message naming the field
and the limit (the stream turns that into a dead letter). Validation is strict, as the published JSON Schemas are:
no ``"3"`` or ``true`` for an integer, no ``"yes"`` or ``1`` for a boolean, no number for a string; a date-time is an
ISO 8601 string (or a ``datetime`` in Python), never a number. (``CallRecord``, the record of one LLM call, is the
exception: it has no ``schema_version`` and is not strict.)

One module per job: ``base`` (the base class, field types, JSON helpers), ``traces``, ``reflections``,
``operations`` (and partial updates), ``batches``, ``versions`` (with ``curation``, the state a version carries to
the next), ``control``, ``dead_letters``, ``checkpoints``,
``llm_calls``, ``promotion``, ``task_sets``, ``review``. Import from ``combee_core.models``.
"""

from __future__ import annotations

from combee_core.models.base import (
    SCHEMA_VERSION,
    CombeeModel,
    EntryId,
    Identifier,
    InsightText,
    PersonName,
    PlaybookId,
    SectionName,
    TagValue,
    Timestamp,
    Usage,
    describe_error,
    dump_json,
    first_error,
    utc_now,
)
from combee_core.models.batches import BatchManifest
from combee_core.models.checkpoints import ViewCheckpoint
from combee_core.models.control import BatchMetrics, ControlDecision, DelaySample
from combee_core.models.curation import ChangedEntry, CurationState, KeptApart, VersionChanges
from combee_core.models.dead_letters import DeadLetter
from combee_core.models.llm_calls import CallRecord, Role
from combee_core.models.operations import (
    AddOp,
    AppliedOperation,
    DeleteOp,
    MergeOp,
    Operation,
    PartialUpdate,
    TagOp,
    UpdateOp,
    UseTag,
)
from combee_core.models.promotion import (
    EvalRequest,
    EvalResult,
    ImprovementCost,
    LiveTest,
    PromotionDecision,
    ProposerModels,
    entries_digest,
)
from combee_core.models.reflections import EntryTag, Insight, Reflection, ShuffledReflection, TraceOutcome
from combee_core.models.review import ReviewDecision, ReviewItem, proposal_digest
from combee_core.models.task_sets import HeldOutTask, TaskSetVersion, tasks_digest
from combee_core.models.traces import MetadataValue, Trace, TraceStep
from combee_core.models.versions import (
    MAX_ALIASES,
    Challenge,
    OutcomeTally,
    PlaybookEntry,
    PlaybookVersion,
    VersionStats,
)

__all__ = [
    "MAX_ALIASES",
    "SCHEMA_VERSION",
    "AddOp",
    "AppliedOperation",
    "BatchManifest",
    "BatchMetrics",
    "CallRecord",
    "Challenge",
    "ChangedEntry",
    "CombeeModel",
    "ControlDecision",
    "CurationState",
    "DeadLetter",
    "DelaySample",
    "DeleteOp",
    "EntryId",
    "EntryTag",
    "EvalRequest",
    "EvalResult",
    "HeldOutTask",
    "TaskSetVersion",
    "tasks_digest",
    "Identifier",
    "PersonName",
    "ImprovementCost",
    "Insight",
    "KeptApart",
    "InsightText",
    "LiveTest",
    "MergeOp",
    "MetadataValue",
    "Operation",
    "OutcomeTally",
    "PartialUpdate",
    "PlaybookEntry",
    "PlaybookId",
    "PlaybookVersion",
    "PromotionDecision",
    "ProposerModels",
    "Reflection",
    "ReviewDecision",
    "ReviewItem",
    "Role",
    "SectionName",
    "ShuffledReflection",
    "TagOp",
    "TagValue",
    "Timestamp",
    "Trace",
    "TraceOutcome",
    "TraceStep",
    "Usage",
    "UpdateOp",
    "UseTag",
    "VersionChanges",
    "VersionStats",
    "ViewCheckpoint",
    "dump_json",
    "entries_digest",
    "describe_error",
    "first_error",
    "utc_now",
    "proposal_digest",
]
