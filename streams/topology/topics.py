"""The topics of a run on the broker: how many partitions each gets (the declaration is ``combee_core.topology``)."""

from __future__ import annotations

from combee_core.settings import CombeeSettings
from combee_core.topology import TOPICS, enabled


def topic_partitions(settings: CombeeSettings) -> dict[str, int]:
    """Full topic name -> partition count for every topic of the run (a topic enabled by a setting only when on)."""
    return {settings.topic(spec.name): settings.partitions if spec.scaled else 1 for spec in TOPICS
            if enabled(spec, settings)}


def topic_configs(settings: CombeeSettings) -> dict[str, dict[str, str]]:
    """Full topic name -> the topic configs it is created with (``cleanup.policy=compact`` for ``checkpoints``)."""
    return {settings.topic(spec.name): {"cleanup.policy": "compact"} for spec in TOPICS
            if spec.compacted and enabled(spec, settings)}
