"""The topics of a run, their partition counts and keys."""

from __future__ import annotations

from dataclasses import dataclass

from combee_core.settings import CombeeSettings


@dataclass(frozen=True)
class TopicSpec:
    """A logical topic: its name without prefix, what it carries and how it is keyed."""

    name: str
    carries: str
    key: str
    scaled: bool
    """Partitioned by ``settings.partitions`` (True) or a single partition (False: state and control topics)."""


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("traces", "Trace", "playbook_id", True),
    TopicSpec("reflections", "Reflection", "playbook_id", True),
    TopicSpec("batches", "BatchManifest", "playbook_id", False),
    TopicSpec("shuffle", "ShuffledReflection", "playbook_id/batch_id/subgroup", True),
    TopicSpec("partials", "PartialUpdate", "playbook_id", True),
    TopicSpec("playbook", "PlaybookVersion", "playbook_id", False),
    TopicSpec("metrics", "BatchMetrics", "playbook_id", False),
    TopicSpec("control", "ControlDecision", "playbook_id", False),
    TopicSpec("dlq", "DeadLetter", "stage", False),
    TopicSpec("llm-calls", "CallRecord", "call key", False),
    TopicSpec("checkpoints", "ViewCheckpoint", "stage/topic", False),
    TopicSpec("eval-requests", "EvalRequest", "playbook_id/task_id", True),
    TopicSpec("eval-results", "EvalResult", "playbook_id", False),
    TopicSpec("promoted", "PromotionDecision", "playbook_id", False),
)


def topic_partitions(settings: CombeeSettings) -> dict[str, int]:
    """Full topic name -> partition count for every topic of the run."""
    return {settings.topic(spec.name): settings.partitions if spec.scaled else 1 for spec in TOPICS}
