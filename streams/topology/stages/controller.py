"""Controller: batch metrics -> delay samples per batch size -> power-law fit -> batch-size decisions.

Active only with ``auto_batch_size``. Whenever it is assigned the metrics partition it rebuilds its samples from the
``metrics`` topic up to the group's committed offset (later records are delivered again) and continues the decision
ids found on the ``control`` topic, so neither a restart nor a move to another worker loses samples or repeats ids;
on revocation it drops them.

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
from streams.topology.runtime import Stage, read_topic

log = logging.getLogger(__name__)

STAGE = CONTROL.name


class ControllerStage(Stage):
    name = STAGE
    consumes = CONTROL.consumes
    input_model = BatchMetrics
    input_label = "batch metrics"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.controller = Controller(ctx.settings)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.controller = Controller(self.settings)
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic(Topic.CONTROL)):
            decision = self.read_state(record, ControlDecision)
            if decision is not None:
                self.controller.restore_decision(decision)
        # Samples up to the group's committed offset; the records after it are delivered again and decided on.
        tp = TopicPartition(self.settings.topic(Topic.METRICS), 0)
        committed = (await self._consumer.committed(tp) if self._consumer is not None else None) or 0
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic(Topic.METRICS)):
            metrics = self.read_state(record, BatchMetrics) if record.offset < committed else None
            if metrics is not None:
                self.controller.observe(metrics)

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.controller = Controller(self.settings)

    async def handle(self, record: ConsumerRecord, metrics: BatchMetrics) -> None:
        await perform(self, self.controller.take(metrics, record, utc_now()))
