"""The order in which a stage makes its work durable, in one place. For the records a stage consumed:

1. **publish** their effects (``StageContext.send``; a numbered record is written and confirmed on its own);
2. **flush** the producer, so everything published is on the broker (:func:`acknowledge`);
3. **mark them done** in the stage's ``OffsetTracker`` (:func:`acknowledge`);
4. **commit** the offsets that are now safe: the lowest offset whose effects are not yet flushed, per partition
   (:func:`commit`, at every tick and when the stage stops);
5. when partitions are taken away, **fence** them: flush what was written before the fence, then commit their
   safe offsets, so the next owner reads after what this one wrote (:func:`fence`).

So an offset is never committed before the effects of its record are durable; a crash between 1 and 4 redelivers
the records and downstream dedupe (numbers, ids) makes that harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from streams.topology.offsets import OffsetTracker
from streams.topology.stage_context import StageContext


class Stage(Protocol):
    """What of a ``streams.topology.runtime.Stage`` the commit order uses."""

    name: str
    ctx: StageContext
    tracker: OffsetTracker

    @property
    def consumer(self) -> Any: ...

    def done(self, record: ConsumerRecord) -> None: ...

log = logging.getLogger(__name__)


async def acknowledge(stage: Stage, records: Iterable[ConsumerRecord], *, unflushed: bool) -> None:
    """Steps 2-3: flush when something was published since the last flush, then mark the records done."""
    if unflushed:
        await stage.ctx.flush()
    for record in records:
        stage.done(record)


async def commit(stage: Stage, partitions: set[TopicPartition]) -> None:
    """Step 4: commit the safe offsets of ``partitions`` that advanced; a failed commit is retried next time
    (redelivery is harmless)."""
    offsets = stage.tracker.committable(partitions)
    consumer = stage.consumer
    if not offsets or consumer is None:
        return
    try:
        await consumer.commit(offsets)
    except Exception as error:  # commit failures are retried at the next tick; redelivery is harmless
        log.warning("%s: commit failed (%s: %s); will retry", stage.name, type(error).__name__, error)
        stage.tracker.commit_failed(set(offsets))


async def fence(stage: Stage, revoked: set[TopicPartition]) -> None:
    """Step 5: what was written before the fence lands before the next owner reads, then the revoked partitions'
    safe offsets are committed."""
    await stage.ctx.flush()
    await commit(stage, revoked)
