"""Controller: batch metrics -> delay samples per batch size -> power-law fit -> batch-size decisions.

Active only with ``auto_batch_size``. Whenever it is assigned the metrics partition it rebuilds its samples from the
``metrics`` topic up to the group's committed offset (later records are delivered again) and continues the decision
ids found on the ``control`` topic, so neither a restart nor a move to another worker loses samples or repeats ids;
on revocation it drops them. Both topics are read from the last offset this process saw (``TopicTail``): a new
assignment reads what was written since, not the whole logs again.

The decisions are ``combee_core.processors.controller``'s; this stage reads the logs and performs its effects.
"""

from __future__ import annotations

import logging

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import BatchMetrics, ControlDecision, utc_now
from combee_core.processors.controller import Controller
from combee_core.topology import CONTROL, Topic
from streams.topology.effects import perform
from streams.topology.runtime import Stage
from streams.topology.topic_reader import TopicTail

log = logging.getLogger(__name__)


class ControllerStage(Stage):
    spec = CONTROL

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.controller = Controller(ctx.settings)
        self._control = TopicTail(ctx.bootstrap, ctx.profile, self.settings.topic(Topic.CONTROL))
        self._metrics = TopicTail(ctx.bootstrap, ctx.profile, self.settings.topic(Topic.METRICS))
        self._decisions: list[ControlDecision] = []
        self._samples: list[tuple[int, BatchMetrics]] = []
        """Every readable record of ``control`` and ``metrics`` (with its offset) seen so far, in log order."""

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        for record in await self._control.read_new():
            if (decision := self.read_state(record, ControlDecision)) is not None:
                self._decisions.append(decision)
        for record in await self._metrics.read_new():
            if (metrics := self.read_state(record, BatchMetrics)) is not None:
                self._samples.append((record.offset, metrics))
        self.controller = Controller(self.settings)
        for decision in self._decisions:
            self.controller.restore_decision(decision)
        # Samples up to the group's committed offset; the records after it are delivered again and decided on.
        tp = TopicPartition(self.settings.topic(Topic.METRICS), 0)
        committed = (await self._consumer.committed(tp) if self._consumer is not None else None) or 0
        for offset, metrics in self._samples:
            if offset < committed:
                self.controller.observe(metrics)

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.controller = Controller(self.settings)

    async def handle(self, record: ConsumerRecord, metrics: BatchMetrics) -> None:
        await perform(self, self.controller.take(metrics, record, utc_now()))
