"""Prometheus metrics of one worker process, served on ``/metrics`` by the health server.

Every worker has its own :class:`~prometheus_client.CollectorRegistry` (no global state: several workers in one
process, as in tests, do not mix). Two sources feed it:

- the LLM call records (``on_call`` of ``run_worker``): calls, tokens, cost and latency by role and model;
- at scrape time, the worker's stages: their counters (``StageContext.count``), the partitions they own, their lag
  (high watermark minus committed offset of each owned partition), and per playbook the version the reducer's live
  view holds and the batch size the batcher uses.

Stage counters named ``<family>.<label>...`` for a family in :data:`LABELLED_COUNTERS` become that family's series
with labels (``records_in.reflect`` -> ``combee_records_in_total{stage="reflect"}``); every other counter becomes
``combee_stage_events_total{event=<name>}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from combee_core.models import CallRecord
    from streams.topology.health import WorkerReadiness
    from streams.topology.runtime import Stage

log = logging.getLogger(__name__)

LAG_REFRESH_TIMEOUT_S = 2.0
"""Longest a scrape waits for the committed offsets behind the lag gauge."""

LLM_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

LABELLED_COUNTERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "records_in": ("combee_records_in", "Records consumed by a stage (from its input topic).", ("stage",)),
    "records_out": ("combee_records_out", "Records written to a topic by this worker.", ("topic",)),
    "dead_letters": ("combee_dead_letters", "Dead letters by stage and reason class (error_type).",
                     ("stage", "error_type")),
    "redactions": ("combee_redactions", "Matches replaced by a placeholder (redaction), by stage and type; the "
                   "values are never logged.", ("stage", "type")),
    "partitions_acquired": ("combee_partitions_acquired", "Partitions a stage took over (rebalances).", ("stage",)),
    "partitions_released": ("combee_partitions_released", "Partitions a stage gave up (rebalances, resets).",
                            ("stage",)),
}
"""Counter name prefix -> (metric name, help, label names). The last label takes the rest of the name."""

SKIPPED_COUNTERS = ("llm_calls.",)
"""Stage counters exported otherwise (the LLM families, from the call records, carry the model too)."""


def split_counter(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``"dead_letters.reflect.JSONDecodeError"`` -> ("dead_letters", ("reflect", "JSONDecodeError")); None when
    the name is not a labelled family (or lacks its labels)."""
    family, dot, rest = name.partition(".")
    if not dot or family not in LABELLED_COUNTERS:
        return None
    labels = LABELLED_COUNTERS[family][2]
    values = tuple(rest.split(".", len(labels) - 1))
    return (family, values) if len(values) == len(labels) and all(values) else None


class WorkerMetrics:
    """The metrics of one worker. ``readiness`` is the worker's :class:`WorkerReadiness` (which learns its stages
    once they are created); hand :meth:`observe_call` to ``run_worker(on_call=...)``."""

    def __init__(self, readiness: WorkerReadiness, registry: CollectorRegistry | None = None) -> None:
        self.readiness = readiness
        self.registry = registry or CollectorRegistry()
        labels = ("role", "model")
        self.llm_calls = Counter("combee_llm_calls", "LLM call attempts by role, model and outcome (ok or error).",
                                 (*labels, "outcome"), registry=self.registry)
        self.llm_tokens = Counter("combee_llm_tokens", "LLM tokens by role, model and kind (prompt or completion).",
                                  (*labels, "kind"), registry=self.registry)
        self.llm_cost = Counter("combee_llm_cost_usd", "LLM cost in US dollars by role and model (as reported; "
                                "simulated for the simulator).", labels, registry=self.registry)
        self.llm_latency = Histogram("combee_llm_call_latency_seconds", "LLM call latency by role and model "
                                     "(modelled by the simulator in virtual mode).", labels,
                                     buckets=LLM_LATENCY_BUCKETS, registry=self.registry)
        self.lag: dict[str, int] = {}
        """stage -> records of its owned partitions (those fetched from yet) not yet committed, refreshed before each
        scrape."""
        self.registry.register(_StageCollector(self))

    def observe_call(self, call: CallRecord) -> None:
        """Count one LLM call attempt."""
        role, model = str(call.role), call.model
        self.llm_calls.labels(role, model, "error" if call.error else "ok").inc()
        self.llm_tokens.labels(role, model, "prompt").inc(call.usage.prompt_tokens)
        self.llm_tokens.labels(role, model, "completion").inc(call.usage.completion_tokens)
        self.llm_cost.labels(role, model).inc(call.usage.cost_usd)
        self.llm_latency.labels(role, model).observe(call.latency_s)

    @property
    def stages(self) -> list[Stage]:
        return list(self.readiness.stages)

    async def refresh(self) -> None:
        """Read each stage's committed offsets (from the group coordinator) before a scrape; a broker that does not
        answer within :data:`LAG_REFRESH_TIMEOUT_S` leaves the previous lag in place."""
        for stage in self.stages:
            consumer = stage.consumer
            if consumer is None:
                continue
            owned = [tp for tp in sorted(stage.held_by_client()) if consumer.highwater(tp) is not None]
            try:
                committed = await asyncio.wait_for(asyncio.gather(*(consumer.committed(tp) for tp in owned)),
                                                   LAG_REFRESH_TIMEOUT_S)
            except (TimeoutError, KafkaError) as error:
                log.debug("metrics: lag of %s not refreshed: %s", stage.name, error)
                continue
            held = consumer.assignment()  # the client may have dropped some while the committed offsets came
            self.lag[stage.name] = sum(max(0, (consumer.highwater(tp) or 0) - (offset or 0))
                                       for tp, offset in zip(owned, committed) if tp in held)

    async def render(self) -> bytes:
        """The text exposition of every metric (refreshed first)."""
        await self.refresh()
        return generate_latest(self.registry)


class _StageCollector(Collector):
    """Reads the stages at scrape time."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        stages = self._metrics.stages
        counters: dict[str, int] = {}
        for ctx in {id(stage.ctx): stage.ctx for stage in stages}.values():  # one context per worker
            for name, value in ctx.counters.items():
                counters[name] = counters.get(name, 0) + value
        yield from _counter_families(counters)

        ready, states = self._metrics.readiness.report()
        up = GaugeMetricFamily("combee_stage_up", "1 while the stage consumes (joined its group), else 0.",
                               labels=("stage",))
        owned = GaugeMetricFamily("combee_stage_assigned_partitions", "Partitions the stage owns now.",
                                  labels=("stage",))
        lag = GaugeMetricFamily("combee_stage_lag_records", "Records of the partitions the stage owns not yet "
                                "committed (high watermark minus committed offset).", labels=("stage",))
        for stage in stages:
            up.add_metric((stage.name,), 1.0 if states.get(stage.name) == "consuming" else 0.0)
            owned.add_metric((stage.name,), float(len(stage.assigned)))
            if stage.name in self._metrics.lag:
                lag.add_metric((stage.name,), float(self._metrics.lag[stage.name]))
        yield up
        yield owned
        yield lag
        yield GaugeMetricFamily("combee_worker_ready", "1 when /readyz answers 200.", value=1.0 if ready else 0.0)
        yield from _playbook_families(stages)
        yield from _backlog_families(stages)


def _counter_families(counters: dict[str, int]) -> Iterator[Metric]:
    families = {family: CounterMetricFamily(name, help_text, labels=labels)
                for family, (name, help_text, labels) in LABELLED_COUNTERS.items()}
    events = CounterMetricFamily("combee_stage_events", "Stage events by name (batches, versions, duplicate_traces, "
                                 "state_resets, ...; see the stages' ctx.count calls).", labels=("event",))
    for name, value in sorted(counters.items()):
        if name.startswith(SKIPPED_COUNTERS):
            continue
        split = split_counter(name)
        if split is None:
            events.add_metric((name,), float(value))
        else:
            families[split[0]].add_metric(split[1], float(value))
    yield from families.values()
    yield events


def _playbook_families(stages: list[Stage]) -> Iterator[Metric]:
    from streams.topology.stages.batch import BatcherStage
    from streams.topology.stages.reduce import ReducerStage

    version = GaugeMetricFamily("combee_playbook_version", "Latest version of each playbook in the reducer's live "
                                "view.", labels=("playbook",))
    entries = GaugeMetricFamily("combee_playbook_entries", "Entries in that version.", labels=("playbook",))
    batch_size = GaugeMetricFamily("combee_playbook_batch_size", "Batch size the batcher closes batches at, per "
                                   "playbook (configured, or the controller's latest decision).", labels=("playbook",))
    for stage in stages:
        if isinstance(stage, ReducerStage):
            for playbook_id, playbook in sorted(stage.logs.playbooks.items()):
                version.add_metric((playbook_id,), float(playbook.version))
                entries.add_metric((playbook_id,), float(len(playbook.entries)))
        elif isinstance(stage, BatcherStage):
            for playbook_id in sorted(stage.batcher.accumulator.playbook_ids()):
                batch_size.add_metric((playbook_id,), float(stage.batcher.accumulator.target(playbook_id)))
    yield version
    yield entries
    yield batch_size


BACKLOG_GAUGES = (
    ("combee_playbook_lag_traces", "Traces of the playbook sent but not yet in a version (the reflector's watch).",
     "lag_traces"),
    ("combee_playbook_lag_seconds", "Age of the oldest trace of the playbook not yet in a version.", "lag_s"),
    ("combee_playbook_rate_in", "Traces of the playbook sent per second (over backlog_window_s).", "rate_in"),
    ("combee_playbook_rate_out", "Traces of the playbook that reached a version per second.", "rate_out"),
    ("combee_playbook_falling_behind", "1 while the playbook falls behind its stream, else 0.", "falling_behind"),
    ("combee_playbook_catch_up_seconds", "Seconds to clear the lag at the current rates (absent: never).",
     "catch_up_s"),
)


def _backlog_families(stages: list[Stage]) -> Iterator[Metric]:
    """Per playbook, the reflector's backlog assessment (``combee_core.control.backlog``), and the traces it shed."""
    from streams.topology.stages.reflect import ReflectorStage

    families = [(GaugeMetricFamily(name, help_text, labels=("playbook",)), field)
                for name, help_text, field in BACKLOG_GAUGES]
    shed = CounterMetricFamily("combee_traces_shed", "Traces shed by overload_policy=sample (each a dead letter).")
    for stage in stages:
        if isinstance(stage, ReflectorStage):
            shed.add_metric((), float(stage.backlog.shed))
            for playbook_id, backlog in sorted(stage.backlog.latest.items()):
                for family, field in families:
                    value = getattr(backlog, field)
                    if value is not None:
                        family.add_metric((playbook_id,), float(value))
    for family, _ in families:
        yield family
    yield shed
