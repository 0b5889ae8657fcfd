"""Time-based retention for the topics that grow without bound (``traces``, ``llm-calls``, ``dlq``), as the durable
broker applies it to the record batches it stores: which batches of one partition to delete.

Never a state topic (``playbook``, ``promoted``, ``review``, ``batches``, ...: stages rebuild their state from them,
:attr:`combee_core.topology.TopicSpec.state`). A batch goes only when every rule agrees: it is older than the
retention, it is not the partition's last batch (the log's end stays where it is), and when any consumer group has
committed an offset on the partition, every record of it lies below the lowest such offset (a stalled stage never
loses what it has not processed; Kafka's own retention does not wait for consumers, this one does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.topology import Topic

RETAINED: tuple[Topic, ...] = (Topic.TRACES, Topic.LLM_CALLS, Topic.DLQ)
"""The logical topics retention applies to; every other topic is kept whole."""


RETAINED_NAMES: tuple[str, ...] = tuple(topic.value for topic in RETAINED)


def retained_topic(name: str, retained: Sequence[str] = RETAINED_NAMES) -> bool:
    """True when a topic's full name (``<prefix><logical name>``) is one of :data:`RETAINED`'s."""
    return any(name == logical or name.endswith(("." + logical, "_" + logical, "-" + logical))
               for logical in retained)


@dataclass(frozen=True)
class StoredBatch:
    """One stored record batch of a partition: its first offset, its size and when it was written (epoch s)."""

    base_offset: int
    size: int
    written_at: float


def batches_to_delete(batches: Sequence[StoredBatch], now: float, max_age_s: float,
                      committed: Sequence[int] = ()) -> list[StoredBatch]:
    """The oldest batches of one partition that may go (a prefix of them in offset order).

    ``committed``: the offsets consumer groups have committed on this partition (the next record each will read).
    A batch ends where the next one starts, so it is wholly below ``min(committed)`` when the next one's first
    offset is at or below it. The walk stops at the first batch that must stay: what remains is contiguous."""
    ordered = sorted(batches, key=lambda batch: batch.base_offset)
    floor = min(committed) if committed else None
    doomed: list[StoredBatch] = []
    for batch, following in zip(ordered, ordered[1:], strict=False):
        if now - batch.written_at < max_age_s:
            break
        if floor is not None and following.base_offset > floor:
            break
        doomed.append(batch)
    return doomed
