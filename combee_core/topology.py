"""The topology of a run, declared once: every topic (name, model, key, partitioning) and every stage (what it
consumes, reads and produces, whether it calls the LLM).

Everything else is derived from this module: the partition counts ``ensure_topics`` creates
(``streams.topology.topics.topic_partitions``), the models an archive validates
(``combee_core.runs.archive.TOPIC_MODELS``), the wire models and their JSON Schemas (:func:`wire_models`,
``combee schemas``), each stage's ``consumes``, the worker's stage names and LLM stages, and the consumer groups
``combee status`` measures. Code names a topic by its constant (``Topic.TRACES``), never by a string. Adding a
stage is one statement here, ``NAME = StageSpec(...)`` (declared is registered: :data:`STAGES` is every
``StageSpec`` of this module in the order declared), a topic if it writes a new one, its package in ``combee_core``
(``combee_core/<StageSpec.core>/processor.py``), its binding ``streams/topology/stages/<name>.py`` (the ``Stage``
subclass whose ``spec`` is it; the worker finds it there by the stage's name) and the entries kept by hand that
``tests/unit/test_adding_a_stage.py`` lists (deploy files, the architecture map), which also proves that nothing
else changes; ``tests/unit/test_topology_declaration.py`` checks that the declaration is consistent and that
nothing else lists it again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel

from combee_core.models import (
    BatchManifest,
    BatchMetrics,
    CallRecord,
    ControlDecision,
    DeadLetter,
    EvalRequest,
    EvalResult,
    PartialUpdate,
    PlaybookVersion,
    PromotionDecision,
    Reflection,
    ReviewDecision,
    ShuffledReflection,
    TaskSetVersion,
    Trace,
    ViewCheckpoint,
)


class Topic(StrEnum):
    """A logical topic: its name without the run's prefix (``settings.topic(Topic.TRACES)`` is the full name). A
    member is a ``str`` equal to that name, so it formats and compares as one."""

    TRACES = "traces"
    REFLECTIONS = "reflections"
    BATCHES = "batches"
    SHUFFLE = "shuffle"
    PARTIALS = "partials"
    PLAYBOOK = "playbook"
    METRICS = "metrics"
    CONTROL = "control"
    DLQ = "dlq"
    LLM_CALLS = "llm-calls"
    CHECKPOINTS = "checkpoints"
    TASK_SETS = "task-sets"
    EVAL_REQUESTS = "eval-requests"
    EVAL_RESULTS = "eval-results"
    PROMOTED = "promoted"
    REVIEW = "review"
    OTLP_SPANS = "otlp_spans"


@dataclass(frozen=True)
class TopicSpec:
    """What a topic carries and how it is keyed and partitioned."""

    topic: Topic
    model: type[BaseModel] | None
    """The model of its records; None for a topic of records in a foreign format (``foreign``)."""
    key: str
    """What a record's key is (it decides which consumer-group member owns the record)."""
    scaled: bool
    """Partitioned by ``settings.partitions`` (True) or a single partition (False: state and control topics)."""
    external: str = ""
    """Who writes the topic besides the stages (agents, operators' commands, evaluators in any language); empty
    when only stages do."""
    state: bool = False
    """Stages rebuild their state from it at start: it must never expire nor be compacted (``deploy/README.md``).
    The others may have a finite retention (longer than any outage to replay across)."""
    validated_on_read: bool = True
    """An archive's records of this topic are validated against ``model`` when the archive is read. False for
    ``traces``: agents may send invalid traces (dead letters in the run; a replay reproduces them)."""
    foreign: str = ""
    """The message of a topic whose records are not Combee's (OTLP's, as protobuf or JSON): it has no schema of
    ours, is named by a setting rather than the run's prefix (``CombeeSettings.topic``) and is not archived by
    ``combee export``."""
    enabled_by: str = ""
    """A boolean setting that must be on for the topic to be created (empty: always)."""
    record: str = "record"
    """What one of its records is called where a stage cannot read it (the dead letter's "unreadable <record>: ...").
    """
    compacted: bool = False
    """Created with ``cleanup.policy=compact``: only the latest record of each key is ever read (``checkpoints``:
    a view resumes from its latest checkpoint). Never a state topic, which is read whole."""

    def __post_init__(self) -> None:
        if self.compacted and self.state:
            raise ValueError(f"{self.topic.value}: a state topic is read whole and must not be compacted")

    @property
    def name(self) -> str:
        """The topic's name without prefix."""
        return self.topic.value

    @property
    def carries(self) -> str:
        """The model's class name (the foreign format for a foreign topic)."""
        return self.model.__name__ if self.model is not None else self.foreign

    @property
    def schema_name(self) -> str:
        """The model's schema file stem under ``schemas/`` (``PlaybookVersion`` -> ``playbook_version``)."""
        if self.model is None:
            raise ValueError(f"topic {self.name} carries {self.foreign}, not a model of ours")
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.model.__name__).lower()


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(Topic.TRACES, Trace, "playbook_id", True, external="agents (combee produce, any client)",
              validated_on_read=False, record="trace"),
    TopicSpec(Topic.REFLECTIONS, Reflection, "playbook_id", True, record="reflection"),
    TopicSpec(Topic.BATCHES, BatchManifest, "playbook_id", False, external="combee playbook import", state=True),
    TopicSpec(Topic.SHUFFLE, ShuffledReflection, "playbook_id/batch_id/subgroup", True, record="shuffled copy"),
    TopicSpec(Topic.PARTIALS, PartialUpdate, "playbook_id", True, record="partial"),
    TopicSpec(Topic.PLAYBOOK, PlaybookVersion, "playbook_id", False, external="combee playbook import",
              state=True),
    TopicSpec(Topic.METRICS, BatchMetrics, "playbook_id", False, state=True, record="batch metrics"),
    TopicSpec(Topic.CONTROL, ControlDecision, "playbook_id", False, state=True),
    TopicSpec(Topic.DLQ, DeadLetter, "stage", False),
    TopicSpec(Topic.LLM_CALLS, CallRecord, "call key", False),
    TopicSpec(Topic.CHECKPOINTS, ViewCheckpoint, "stage/topic", False, compacted=True),
    TopicSpec(Topic.TASK_SETS, TaskSetVersion, "name", False, external="combee tasks add", state=True,
              record="task set"),
    TopicSpec(Topic.EVAL_REQUESTS, EvalRequest, "playbook_id/task_id", True, record="evaluation request"),
    TopicSpec(Topic.EVAL_RESULTS, EvalResult, "playbook_id", False, external="evaluators in any language"),
    TopicSpec(Topic.PROMOTED, PromotionDecision, "playbook_id", False, external="combee promote / combee rollback",
              state=True),
    TopicSpec(Topic.REVIEW, ReviewDecision, "playbook_id", False, external="combee review / combee ui (reviewers)",
              state=True),
    TopicSpec(Topic.OTLP_SPANS, None, "OTel trace id (or none)", True,
              external="the OpenTelemetry Collector's Kafka exporter, combee otlp-receiver", validated_on_read=False,
              foreign="ExportTraceServiceRequest", enabled_by="otlp_ingest", record="OTLP record"),
)
"""Every topic of a run, in flow order."""


@dataclass(frozen=True)
class RunsWhen:
    """When a stage runs: every setting of ``on`` is on and every one of ``off`` is off (no setting: always)."""

    on: tuple[str, ...] = ()
    off: tuple[str, ...] = ()
    said: str = ""
    """What an operator is told about a stage left out ("only with --promotion")."""

    def __call__(self, settings: object) -> bool:
        return all(getattr(settings, name) for name in self.on) and not any(getattr(settings, n) for n in self.off)


ALWAYS = RunsWhen()


@dataclass(frozen=True)
class StageSpec:
    """A stage: its name (for ``combee worker --stages``, its consumer group and its dead letters), the topics its
    consumer group consumes, the topics it reads whole as live views (outside the group), and what it produces."""

    name: str
    consumes: tuple[Topic, ...]
    """Its consumer group's input (partitions of these are what replicas share)."""
    produces: tuple[Topic, ...]
    """Every topic it may write (dead letters included)."""
    reads: tuple[Topic, ...] = ()
    """Topics it follows as live views, every replica whole, outside its group."""
    llm: bool = False
    """It calls the LLM (the worker builds the LLM roles only for such stages; their calls go to ``llm-calls``)."""
    runs_when: RunsWhen = ALWAYS
    """The settings under which it runs (``combee worker`` leaves it out otherwise, and says why)."""
    package: str = ""
    """Its package in ``combee_core`` (:attr:`core`), when that is not its name."""

    @property
    def core(self) -> str:
        """Its package in ``combee_core``: ``combee_core/<core>/processor.py`` is its processor, which its binding
        (the ``Stage`` subclass in ``streams/topology/stages/`` whose ``spec`` is this) calls."""
        return self.package or self.name


# The stages, in flow order. A declaration is the stage's registration (STAGES below collects them): nothing else
# lists them.
REFLECT = StageSpec("reflect", consumes=(Topic.TRACES,),
                    produces=(Topic.REFLECTIONS, Topic.DLQ, Topic.LLM_CALLS, Topic.CHECKPOINTS),
                    reads=(Topic.PLAYBOOK,), llm=True)
BATCH = StageSpec("batch", consumes=(Topic.REFLECTIONS,),
                  produces=(Topic.BATCHES, Topic.SHUFFLE, Topic.DLQ, Topic.CHECKPOINTS),
                  reads=(Topic.BATCHES, Topic.CONTROL, Topic.PLAYBOOK))
AGGREGATE = StageSpec("aggregate", consumes=(Topic.SHUFFLE,),
                      produces=(Topic.PARTIALS, Topic.DLQ, Topic.LLM_CALLS, Topic.CHECKPOINTS),
                      reads=(Topic.PLAYBOOK,), llm=True)
REDUCE = StageSpec("reduce", consumes=(Topic.PARTIALS,),
                   produces=(Topic.PLAYBOOK, Topic.METRICS, Topic.DLQ, Topic.LLM_CALLS, Topic.CHECKPOINTS),
                   reads=(Topic.PLAYBOOK, Topic.BATCHES, Topic.PROMOTED), llm=True)
CONTROL = StageSpec("control", consumes=(Topic.METRICS,), produces=(Topic.CONTROL, Topic.DLQ, Topic.CHECKPOINTS),
                    reads=(Topic.CONTROL,))
WITH_PROMOTION = RunsWhen(on=("promotion",), said="only with --promotion")
PROMOTE = StageSpec("promote", consumes=(Topic.EVAL_RESULTS,),
                    produces=(Topic.EVAL_REQUESTS, Topic.PROMOTED, Topic.DLQ),
                    reads=(Topic.PROMOTED, Topic.BATCHES, Topic.PLAYBOOK, Topic.EVAL_RESULTS, Topic.TRACES,
                           Topic.TASK_SETS),
                    runs_when=WITH_PROMOTION)
EVALUATE = StageSpec("evaluate", consumes=(Topic.EVAL_REQUESTS,),
                     produces=(Topic.EVAL_RESULTS, Topic.TASK_SETS, Topic.DLQ),
                     runs_when=WITH_PROMOTION)
GUARD = StageSpec("guard", consumes=(Topic.PROMOTED,), produces=(Topic.PROMOTED, Topic.DLQ, Topic.CHECKPOINTS),
                  reads=(Topic.PROMOTED, Topic.PLAYBOOK, Topic.TRACES),
                  runs_when=RunsWhen(on=("guard",), off=("promotion",),
                                     said="only without --promotion, unless COMBEE_GUARD=0"))

INGEST_OTLP = StageSpec("ingest-otlp", consumes=(Topic.OTLP_SPANS,), produces=(Topic.TRACES, Topic.DLQ),
                        runs_when=RunsWhen(on=("otlp_ingest",), said="only with --otlp or COMBEE_OTLP_INGEST=1"),
                        package="otlp")


def _declared_stages(namespace: Mapping[str, object]) -> tuple[StageSpec, ...]:
    """Every :class:`StageSpec` bound in ``namespace`` (this module's), in the order declared: declaring a stage is
    its registration, there is no list of them to keep. ValueError for a stage declared twice (or bound to two
    names)."""
    stages = tuple(value for value in namespace.values() if isinstance(value, StageSpec))
    if len({stage.name for stage in stages}) != len(stages):
        raise ValueError(f"a stage is declared twice in the topology: {[stage.name for stage in stages]}")
    return stages


STAGES: tuple[StageSpec, ...] = _declared_stages(globals())
"""Every stage, in flow order: the order of their declarations above (the order ``combee worker`` starts them and
``combee status`` lists them); the optional ones last: promotion's, the guard (promotion off), then ``ingest-otlp``
(a door in front of ``traces``, on with ``otlp_ingest``)."""


def topic_spec(topic: Topic | str) -> TopicSpec:
    """The declaration of ``topic`` (a :class:`Topic` or its name); KeyError for an undeclared name."""
    for spec in TOPICS:
        if spec.topic == topic:
            return spec
    raise KeyError(f"no topic {topic!r} in the topology")


def stage_spec(name: str) -> StageSpec:
    """The declaration of the stage called ``name``; KeyError for an undeclared one."""
    for spec in STAGES:
        if spec.name == name:
            return spec
    raise KeyError(f"no stage {name!r} in the topology")


def wire_models() -> dict[str, type[BaseModel]]:
    """Schema file stem -> model, for every topic's model (what ``combee schemas`` writes)."""
    return {spec.schema_name: spec.model for spec in TOPICS if spec.model is not None}


def archive_models() -> dict[str, type[BaseModel]]:
    """Topic name -> model, for the topics whose archived records are validated when an archive is read."""
    return {spec.name: spec.model for spec in TOPICS if spec.validated_on_read and spec.model is not None}


def enabled(spec: TopicSpec, settings: object) -> bool:
    """Whether a topic is created under ``settings`` (its ``enabled_by`` setting, if any, is on)."""
    return not spec.enabled_by or bool(getattr(settings, spec.enabled_by))


def writers(topic: Topic) -> tuple[str, ...]:
    """The stages that produce ``topic``."""
    return tuple(stage.name for stage in STAGES if topic in stage.produces)
