"""The ``ingest-otlp`` stage's decisions: OTLP span batches in, one :class:`~combee_core.models.Trace` per run out.

Each input is the spans of one OTLP record (decoded by ``combee_core.otlp.wire``) with its token. Runs are assembled
by :class:`~combee_core.otlp.assembler.TraceAssembler`, mapped by ``combee_core.otlp.mapping.map_trace`` (the same
mapping the OTLP/HTTP receiver's records go through) and published on ``traces``; a run that cannot make a trace is
a dead letter with the reason (content capture off, no playbook...). An input is acknowledged once every run it
contributed to is published or dead-lettered. Runs that finish without an evaluation and wait for one are counted
(``otlp_runs_waiting_for_feedback``) and said in one log line, then at most once per :data:`SAY_WAITING_EVERY_S`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from combee_core.ingest.redaction import RedactionConfig, RedactionError, Redactor
from combee_core.log_limit import RepeatLimit
from combee_core.models import Trace
from combee_core.otlp.assembler import TraceAssembler
from combee_core.otlp.mapping import UnmappableTrace, map_trace, playbook_of, trace_id_for
from combee_core.otlp.wire import OtlpSpan
from combee_core.processors.effects import Count, Effect, Publish, Reject, acknowledge
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

log = logging.getLogger(__name__)

SAY_WAITING_EVERY_S = 600.0
"""Seconds between two log lines about runs waiting for their feedback (the counter counts every run)."""


@dataclass
class OtlpIngest:
    """Assemble, map and publish (module docstring)."""

    assembler: TraceAssembler
    default_playbook: str | None = None
    redaction: RedactionConfig | None = None
    """Redact each trace before it is published (``redact_before_produce``); None: published as mapped."""
    _counted: Counter[str] = field(default_factory=Counter)
    _said: RepeatLimit[str] = field(default_factory=lambda: RepeatLimit[str](SAY_WAITING_EVERY_S))

    @classmethod
    def from_settings(cls, settings: CombeeSettings) -> OtlpIngest:
        return cls(TraceAssembler(idle_s=settings.otlp_idle_s, feedback_wait_s=settings.otlp_feedback_wait_s,
                                  window_s=settings.otlp_window_s, max_pending=settings.otlp_max_pending,
                                  group_by=settings.otlp_group_by),
                   default_playbook=settings.otlp_default_playbook,
                   redaction=RedactionConfig.from_settings(settings)
                   if settings.redact and settings.redact_before_produce else None)

    def take(self, spans: Sequence[OtlpSpan], token: object, now: float) -> list[Effect]:
        """One record's spans: held until their runs are ready (settled at once when it adds nothing pending)."""
        effects: list[Effect] = [Count("otlp_records")]
        effects += acknowledge(self.assembler.add(spans, token, now))
        return effects + self._counts(None)

    def tick(self, now: float) -> list[Effect]:
        """Publish (or dead-letter) the runs ready at ``now``, then acknowledge the inputs that settles."""
        ready, settled = self.assembler.take_ready(now)
        effects: list[Effect] = []
        for run in ready:
            try:
                trace = map_trace(run.key, run.spans, default_playbook=self.default_playbook,
                                  metadata={"otlp.feedback": run.feedback})
                trace, redacted = self._redact(trace)
            except (UnmappableTrace, RedactionError) as error:
                effects += [Reject(None, str(error), type(error).__name__, trace_id=trace_id_for(run.key),
                                   playbook_id=playbook_of(run.spans)),
                            Count("otlp_runs_dead_lettered")]
                continue
            effects += [*redacted, Publish(Topic.TRACES, trace.playbook_id, trace), Count("otlp_traces")]
            if run.feedback.startswith("none"):
                effects.append(Count("otlp_traces_without_feedback"))
        return effects + acknowledge(settled) + self._counts(now)

    def reset(self) -> list[object]:
        """Forget pending runs (partitions lost); the tokens they held must be delivered again."""
        return self.assembler.reset()

    def _redact(self, trace: Trace) -> tuple[Trace, list[Effect]]:
        """The trace redacted (when on) and a count per placeholder type put in."""
        if self.redaction is None:
            return trace, []
        redactor = Redactor(self.redaction)
        trace = redactor.trace(trace)
        return trace, [Count(f"redactions.ingest-otlp.{name}", n) for name, n in redactor.counts.items() if n]

    def _counts(self, now: float | None) -> list[Effect]:
        """The assembler's counters since the last call, as :class:`Count` effects (and the waiting runs said)."""
        effects: list[Effect] = []
        for name, total in self.assembler.counts.items():
            if total > self._counted[name]:
                effects.append(Count(f"otlp_{name}", total - self._counted[name]))
                if name == "runs_waiting_for_feedback" and now is not None:
                    self._say_waiting(now)
                self._counted[name] = total
        return effects

    def _say_waiting(self, now: float) -> None:
        if self._said.observe("waiting", now) is None:
            return
        waiting = sum(1 for run in self.assembler.pending.values() if run.waiting)
        log.warning("ingest-otlp: %d run(s) finished without an evaluation (a gen_ai.evaluation.result event or "
                    "OpenInference evaluations.N.evaluation.* attributes) and wait up to %g s for one before going "
                    "on without (COMBEE_OTLP_FEEDBACK_WAIT_S); every such run is counted as "
                    "otlp_runs_waiting_for_feedback", waiting, self.assembler.feedback_wait_s)
