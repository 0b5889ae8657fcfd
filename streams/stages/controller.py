"""Controller: batch metrics -> delay samples per batch size -> power-law fit -> batch-size decisions.

Active only with ``auto_batch_size``. Whenever it is assigned the metrics partition it rebuilds its samples from the
``metrics`` topic up to the group's committed offset (later records are delivered again) and continues the decision
ids found on the ``control`` topic, so neither a restart nor a move to another worker loses samples or repeats ids;
on revocation it drops them.
"""

from __future__ import annotations

import logging

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.controller import (
    BatchSizeController,
    ControllerConfig,
    clock_description,
    sample_delay,
    sample_rollout,
)
from combee_core.models import BatchMetrics, ControlDecision, DelaySample, utc_now
from streams.runtime import Stage, read_topic

log = logging.getLogger(__name__)

STAGE = "control"


class ControllerStage(Stage):
    name = STAGE
    consumes = ("metrics",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.config = ControllerConfig(
            tau=settings.controller_tau, bs_min=settings.controller_bs_min, bs_max=settings.controller_bs_max,
            fleet_agents=settings.fleet_agents if settings.fleet_mode == "sync" else None,
        )
        self._forget()

    def _forget(self) -> None:
        self.controllers: dict[str, BatchSizeController] = {}
        self.next_decision_id: dict[str, int] = {}
        self.current: dict[str, tuple[int, str]] = {}  # playbook -> (batch size, phase) last published
        self.seen_batches: dict[str, set[int]] = {}

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._forget()
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("control")):
            decision = self.read_state(record, ControlDecision)
            if decision is None or decision.decision_id < self.next_decision_id.get(decision.playbook_id, 0):
                continue  # the first decision of each id counts
            self.next_decision_id[decision.playbook_id] = decision.decision_id + 1
            self.current[decision.playbook_id] = (decision.batch_size, decision.phase)
        # Samples up to the group's committed offset; the records after it are delivered again and decided on.
        tp = TopicPartition(self.settings.topic("metrics"), 0)
        committed = (await self._consumer.committed(tp) if self._consumer is not None else None) or 0
        for record in await read_topic(self.ctx.bootstrap, self.ctx.profile, self.settings.topic("metrics")):
            metrics = self.read_state(record, BatchMetrics) if record.offset < committed else None
            if metrics is not None:
                self._observe(metrics)

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self._forget()

    def controller(self, playbook_id: str) -> BatchSizeController:
        if playbook_id not in self.controllers:
            self.controllers[playbook_id] = BatchSizeController(self.config)
        return self.controllers[playbook_id]

    def _observe(self, metrics: BatchMetrics) -> bool:
        """Record a sample once per batch; False for a redelivered one."""
        seen = self.seen_batches.setdefault(metrics.playbook_id, set())
        if metrics.batch_id in seen:
            return False
        seen.add(metrics.batch_id)
        delay = sample_delay(self.settings, metrics)
        if delay is None:  # a sync round on the wall clock needs the previous version's time
            return False
        rollout = sample_rollout(self.settings, metrics, delay)
        self.controller(metrics.playbook_id).observe(metrics.batch_size, delay, rollout)
        return True

    async def handle(self, record: ConsumerRecord) -> None:
        if not self.owns(TopicPartition(record.topic, record.partition)):
            return
        try:
            metrics = BatchMetrics.from_json_bytes(record.value)
        except (ValueError, ValidationError) as error:
            await self.reject(record, f"unreadable batch metrics: {error}", error)
            return
        if self._observe(metrics) and self.settings.auto_batch_size:
            decision = self.controller(metrics.playbook_id).decide()
            # a new size, or the first fitted decision (so the published reason says why profiling ended there)
            if (decision.batch_size, decision.phase) != self.current.get(metrics.playbook_id):
                await self._publish(metrics.playbook_id, decision)
        self.done(record)

    async def _publish(self, playbook_id: str, decision) -> None:
        decision_id = self.next_decision_id.get(playbook_id, 0)
        fit = decision.fit
        record = ControlDecision(
            playbook_id=playbook_id,
            decision_id=decision_id,
            batch_size=decision.batch_size,
            phase=decision.phase,
            fit_A=fit.A if fit else None,
            fit_alpha=fit.alpha if fit else None,
            r2=fit.r2 if fit else None,
            tau=self.config.tau,
            samples=[DelaySample(batch_size=bs, delay_s=d, rollout_s=r) for bs, d, r in decision.samples],
            reason=decision.reason,
            decided_at=utc_now(),
            clock=clock_description(self.settings),
            plateau_batch_size=decision.plateau,
            bs_min=self.config.bs_min,
            bs_max=self.config.bs_max,
            best_batch_size=decision.best,
            rollout_task_s=decision.task_s,
            fleet_agents=self.config.fleet_agents,
        )
        await self.ctx.send("control", playbook_id, record, wait=True)
        self.next_decision_id[playbook_id] = decision_id + 1
        self.current[playbook_id] = (decision.batch_size, decision.phase)
        self.ctx.count("decisions")
        log.info("controller: %s batch size -> %d (%s)", playbook_id, decision.batch_size, decision.reason)
