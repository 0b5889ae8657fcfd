"""Controller: batch metrics -> delay samples per batch size -> power-law fit -> batch-size decisions.

Active only with ``auto_batch_size``. Whenever it is assigned the metrics partition it rebuilds its samples from the
``metrics`` topic up to the group's committed offset (later records are delivered again) and continues the decision
ids found on the ``control`` topic, so neither a restart nor a move to another worker loses samples or repeats ids;
on revocation it drops them. Both topics are read from the last offset this process saw (``TopicTail``): a new
assignment reads what was written since, not the whole logs again. A process starts them from its latest checkpoints
(``control/control``, ``control/metrics`` on ``checkpoints``, written every ``view_checkpoint_every`` metrics):
the offsets from which the logs still hold each playbook's last decision and the metrics its decisions rest on
(``combee_core.control.processor.resume_offset``), so a restart does not re-read the whole logs either.

The decisions are ``combee_core.control.processor``'s; this stage reads the logs and performs its effects.
"""

from __future__ import annotations

import logging

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.control.processor import Controller, resume_offset
from combee_core.models import BatchMetrics, ControlDecision, ViewCheckpoint, utc_now
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
        self._decisions: list[tuple[int, ControlDecision]] = []
        self._samples: list[tuple[int, BatchMetrics]] = []
        """The readable records of ``control`` and ``metrics`` (with their offsets) from the latest checkpoint's
        positions on, in log order."""
        self._resumed = False
        self._handled = 0

    async def _resume(self) -> None:
        """Start both tails at the latest checkpoints' positions (none: from the beginning)."""
        for topic, tail in ((Topic.CONTROL, self._control), (Topic.METRICS, self._metrics)):
            view = f"{self.name}/{topic}"
            if (checkpoint := await self.checkpoints.latest(view)) is not None:
                tail.next = {0: checkpoint.position}
                log.info("%s: resumed from its checkpoint at offset %d", view, checkpoint.position)
        self._resumed = True

    async def _read_new(self) -> None:
        for record in await self._control.read_new():
            if (decision := self.read_state(record, ControlDecision)) is not None:
                self._decisions.append((record.offset, decision))
        for record in await self._metrics.read_new():
            if (metrics := self.read_state(record, BatchMetrics)) is not None:
                self._samples.append((record.offset, metrics))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        if not self._resumed:
            await self._resume()
        await self._read_new()
        self.controller = Controller(self.settings)
        for _, decision in self._decisions:
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
        self._handled += 1
        if self._handled % self.settings.view_checkpoint_every == 0:
            await self._checkpoint()

    async def _checkpoint(self) -> None:
        """Write where each log still holds what a restart needs, and forget the records before it."""
        await self._read_new()
        control_from = resume_offset([(offset, d.playbook_id) for offset, d in self._decisions], keep=1)
        metrics_from = resume_offset([(offset, m.playbook_id) for offset, m in self._samples],
                                     keep=self.controller.samples_kept)
        for topic, position in ((Topic.CONTROL, control_from), (Topic.METRICS, metrics_from)):
            if position is not None:
                view = f"{self.name}/{topic}"
                await self.ctx.send(Topic.CHECKPOINTS, view, ViewCheckpoint(view=view, position=position, nexts={},
                                                                            written_at=utc_now()))
        self._decisions = [(offset, d) for offset, d in self._decisions if offset >= (control_from or 0)]
        self._samples = [(offset, m) for offset, m in self._samples if offset >= (metrics_from or 0)]
