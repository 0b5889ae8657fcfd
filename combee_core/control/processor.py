"""The controller's decisions: one delay sample per batch (a redelivered metric is not a second sample), a fresh
decision only when the batch size (or the controller's phase) changes, decision ids that continue those on the
``control`` log.

Pure: the stage restores it from the logs at assignment (``restore_decision`` for each record of ``control``,
``observe`` for each metric up to the group's committed offset) and gives it each new metric with a token. A restart
reads the logs from where they still hold what the decisions rest on (:func:`resume_offset`: each playbook's last
decision, its last :attr:`Controller.samples_kept` metrics), checkpointed by the stage.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from datetime import datetime

from combee_core.control.chain_costs import ChainTimes, VersionCost
from combee_core.control.controller import BatchSizeController, ControllerConfig, Decision
from combee_core.control.delay_model import clock_description, sample_delay, sample_rollout
from combee_core.control.streaming import StreamChoice, StreamingObjective
from combee_core.models import BatchMetrics, ControlDecision, DelaySample
from combee_core.processors.effects import Count, Effect, Publish, acknowledge
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

log = logging.getLogger(__name__)

STREAMING_CLOCK = "streaming: the arrival rate and each version's cycle (combee_core/control/streaming.py)"


def resume_offset(records: Sequence[tuple[int, str]], keep: int) -> int | None:
    """The offset from which a log (``(offset, playbook id)`` per record, in log order) still holds every playbook's
    last ``keep`` records: where a restart can start reading it (None: no records)."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    last: dict[str, deque[int]] = {}
    for offset, playbook_id in records:
        last.setdefault(playbook_id, deque(maxlen=keep)).append(offset)
    return min((offsets[0] for offsets in last.values()), default=None)


class Controller:
    """Batch metrics in, batch-size decisions out, per playbook."""

    def __init__(self, settings: CombeeSettings) -> None:
        self.settings = settings
        self.config = ControllerConfig(
            tau=settings.controller_tau, bs_min=settings.controller_bs_min, bs_max=settings.batch_size_bound,
            fleet_agents=settings.fleet_agents if settings.fleet_mode == "sync" else None,
        )
        self.controllers: dict[str, BatchSizeController] = {}
        self.next_decision_id: dict[str, int] = {}
        self.current: dict[str, tuple[int, str]] = {}  # playbook -> (batch size, phase) last published
        self.seen_batches: dict[str, set[int]] = {}
        self.streaming: dict[str, StreamingObjective] = {}
        """Per playbook, the streaming objective (async fleets with ``controller_objective="stream"``)."""
        self.over_capacity: dict[str, bool] = {}
        self.chain_times: dict[str, ChainTimes] = {}
        """Per playbook, the recent versions' publication times (a version's cost with the context lag)."""

    @property
    def samples_kept(self) -> int:
        """Metrics per playbook its decisions rest on (the fit's recent samples; the streaming objective's cycles):
        a restart needs these, not the whole log (``resume_offset``)."""
        return max(self.config.max_samples, StreamingObjective.cycles_kept())

    @property
    def streams(self) -> bool:
        return self.settings.fleet_mode == "async" and self.settings.controller_objective == "stream"

    def stream(self, playbook_id: str) -> StreamingObjective:
        if playbook_id not in self.streaming:
            self.streaming[playbook_id] = StreamingObjective(
                self.config.bs_min, self.config.bs_max, self.settings.controller_max_utilisation)
        return self.streaming[playbook_id]

    def controller(self, playbook_id: str) -> BatchSizeController:
        if playbook_id not in self.controllers:
            self.controllers[playbook_id] = BatchSizeController(self.config)
        return self.controllers[playbook_id]

    def restore_decision(self, decision: ControlDecision) -> None:
        """A record of the ``control`` log, in order: the first decision of each id counts."""
        if decision.decision_id < self.next_decision_id.get(decision.playbook_id, 0):
            return
        self.next_decision_id[decision.playbook_id] = decision.decision_id + 1
        self.current[decision.playbook_id] = (decision.batch_size, decision.phase)

    def observe(self, metrics: BatchMetrics) -> bool:
        """Record a sample once per batch; False for a redelivered one (or one with no delay on this clock yet)."""
        seen = self.seen_batches.setdefault(metrics.playbook_id, set())
        if metrics.batch_id in seen:
            return False
        seen.add(metrics.batch_id)
        delay = sample_delay(self.settings, metrics)
        if delay is None:  # a sync round on the wall clock needs the previous version's time
            return False
        rollout = sample_rollout(self.settings, metrics, delay)
        self.controller(metrics.playbook_id).observe(metrics.batch_size, delay, rollout)
        if self.streams and metrics.batch_closed_at is not None:
            closed = metrics.batch_closed_at.timestamp()
            cost = self._cost(metrics, closed)
            self.stream(metrics.playbook_id).observe(metrics.batch_size, closed, cost.period_s, cost.own_s)
        return True

    def _cost(self, metrics: BatchMetrics, closed: float) -> VersionCost:
        """The version's cycle and its batch's own time (``combee_core.control.chain_costs``): on the wall clock from
        the batch's close and the chain's publication times, two batches at once with the context lag; modelled,
        the LLM critical path."""
        if self.settings.controller_clock == "modelled":
            return VersionCost(metrics.llm_critical_path_s, metrics.llm_critical_path_s)
        times = self.chain_times.setdefault(metrics.playbook_id, ChainTimes())
        return times.cost(metrics.batch_id, closed, closed + metrics.delay_s, metrics.round_s,
                          self.settings.context_lag)

    def take(self, metrics: BatchMetrics, token: object, now: datetime) -> list[Effect]:
        """A new metric: its sample, and with ``auto_batch_size`` a decision when the size or the phase changes."""
        effects: list[Effect] = []
        if not (self.observe(metrics) and self.settings.auto_batch_size):
            pass
        elif self.streams:
            effects += self._streaming_decision(metrics.playbook_id, now)
        else:
            decision = self.controller(metrics.playbook_id).decide()
            # a new size, or the first fitted decision (so the published reason says why profiling ended there)
            if (decision.batch_size, decision.phase) != self.current.get(metrics.playbook_id):
                effects += self._decision(metrics.playbook_id, decision, now)
        return [*effects, *acknowledge([token])]

    def _decision(self, playbook_id: str, decision: Decision, now: datetime) -> list[Effect]:
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
            decided_at=now,
            clock=STREAMING_CLOCK if self.streams else clock_description(self.settings),
            plateau_batch_size=decision.plateau,
            bs_min=self.config.bs_min,
            bs_max=self.config.bs_max,
            best_batch_size=decision.best,
            rollout_task_s=decision.task_s,
            fleet_agents=self.config.fleet_agents,
        )
        self.next_decision_id[playbook_id] = decision_id + 1
        self.current[playbook_id] = (decision.batch_size, decision.phase)
        log.info("controller: %s batch size -> %d (%s)", playbook_id, decision.batch_size, decision.reason)
        return [Publish(Topic.CONTROL, playbook_id, record), Count("decisions")]

    def _streaming_decision(self, playbook_id: str, now: datetime) -> list[Effect]:
        """The streaming objective's size, published when it rises, or falls by more than the hysteresis."""
        choice = self.stream(playbook_id).choose()
        if choice is None:
            return []
        current = self.current.get(playbook_id, (self.settings.batch_size, "fixed"))[0]
        if choice.over_capacity != self.over_capacity.get(playbook_id, False):  # said when it changes
            self.over_capacity[playbook_id] = choice.over_capacity
            reason = choice.reason(self.config.bs_min, self.config.bs_max, self.settings.controller_max_utilisation)
            if choice.over_capacity:
                log.warning("controller: %s is over capacity: %s", playbook_id, reason)
            else:
                log.info("controller: %s is back within capacity: %s", playbook_id, reason)
        falls = choice.batch_size < current and (current - choice.batch_size) / current > self.config.hysteresis
        if not (choice.batch_size > current or falls):
            return []
        return self._decision(playbook_id, self._as_decision(playbook_id, choice), now)

    def _as_decision(self, playbook_id: str, choice: StreamChoice) -> Decision:
        reason = choice.reason(self.config.bs_min, self.config.bs_max, self.settings.controller_max_utilisation)
        return Decision(batch_size=choice.batch_size, phase="fitted", fit=None, reason=reason,
                        samples=self.controller(playbook_id).samples, best=choice.batch_size)
