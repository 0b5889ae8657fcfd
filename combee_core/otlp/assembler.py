"""Spans -> runs: the spans of one run gathered over a bounded window, with the run's evaluation joined.

Records carry batches of spans, not traces: a run's spans come in several records, interleaved with other runs', and
a run's evaluation (``gen_ai.evaluation.result`` or OpenInference ``evaluations.N.evaluation.*``:
``combee_core.otlp.evaluations``) may come minutes later, on a span of the run's trace or on a carrier span linked to
it. :class:`TraceAssembler` keeps one
:class:`PendingRun` per key (the OTel trace id, or the conversation id when grouping by conversation) and says when
each run is ready, with time passed in (no clock of its own):

- a run is *finished* when its root span has arrived (a span without parent), else ``idle_s`` after its last span;
- a finished run with an evaluation is ready at once; without one it waits ``feedback_wait_s`` for it (the delayed
  feedback join; counted once per run as ``runs_waiting_for_feedback`` when the wait starts), then goes on without
  it, and its note says so;
- a run is ready ``window_s`` after its first span whatever it waits for, and the oldest run is taken early when
  more than ``max_pending`` runs are pending (each says why in its note: no silent caps);
- a span already held (a retried export) is dropped and counted; spans of a run already emitted (of the last
  ``remember`` runs) are dropped and counted too: ``late_feedback`` when they carry an evaluation the run did not
  have (a retry of a span that was in the run, its root span with its evaluation say, is ``spans_after_emit``).

Inputs are named by opaque tokens (a stage's records); a token is *settled* once every run it contributed to has
been taken (:meth:`take_ready`), so a stage commits a record only after its runs are published.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from combee_core.otlp.evaluations import carries_evaluation, feedback_target
from combee_core.otlp.mapping import conversation_id
from combee_core.otlp.wire import OtlpSpan

GroupBy = Literal["trace", "conversation"]


@dataclass
class PendingRun:
    """The spans of one run gathered so far."""

    key: str
    first_seen: float
    last_seen: float
    spans: dict[str, OtlpSpan] = field(default_factory=dict)
    tokens: set[object] = field(default_factory=set)
    root_seen: float | None = None
    evaluated_at: float | None = None
    waiting: bool = False
    """Counted as waiting for its feedback (finished without any)."""
    evaluated: set[str] = field(default_factory=set)
    """Ids of its spans that carry an evaluation."""

    def finished_at(self, idle_s: float) -> float:
        return self.root_seen if self.root_seen is not None else self.last_seen + idle_s


@dataclass(frozen=True)
class ReadyRun:
    """A run to map: its key, spans, and how its feedback was joined (for the trace's metadata)."""

    key: str
    spans: tuple[OtlpSpan, ...]
    feedback: str
    """``with-run``, ``joined after N s``, ``none within N s``, ``none (window of N s ended)`` or ``none (over N
    pending runs)``."""


@dataclass
class TraceAssembler:
    """Pending runs, their spans and the tokens they hold (module docstring)."""

    idle_s: float = 5.0
    feedback_wait_s: float = 300.0
    window_s: float = 900.0
    max_pending: int = 10_000
    remember: int = 100_000
    group_by: GroupBy = "trace"
    pending: dict[str, PendingRun] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    _alias: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """trace id -> conversation key, for runs grouped by conversation (the last ``remember`` trace ids)."""
    _emitted: OrderedDict[str, frozenset[str]] = field(default_factory=OrderedDict)
    """key of an emitted run -> the ids of its spans that carried an evaluation (a retry of one is not late)."""
    _holds: dict[object, set[str]] = field(default_factory=dict)
    """token -> keys of the pending runs it contributed to."""

    def _key(self, span: OtlpSpan) -> str:
        trace_id = feedback_target(span)  # a post-hoc carrier's: the run its link names
        if self.group_by == "conversation":
            conversation = conversation_id(span)
            if conversation:
                key = f"conv:{conversation}"
                self._merge(trace_id, key)
                return key
            return self._alias.get(trace_id, trace_id)
        return trace_id

    def _merge(self, trace_id: str, key: str) -> None:
        """A trace's spans seen before its conversation id was known join the conversation's run."""
        self._alias[trace_id] = key
        self._alias.move_to_end(trace_id)
        while len(self._alias) > self.remember:
            self._alias.popitem(last=False)
        early = self.pending.pop(trace_id, None)
        if early is None:
            return
        run = self.pending.setdefault(key, PendingRun(key, early.first_seen, early.last_seen))
        run.spans.update(early.spans)
        run.first_seen = min(run.first_seen, early.first_seen)
        run.last_seen = max(run.last_seen, early.last_seen)
        run.root_seen = run.root_seen if early.root_seen is None else early.root_seen
        run.evaluated_at = run.evaluated_at if early.evaluated_at is None else early.evaluated_at
        run.waiting = run.waiting or early.waiting
        run.evaluated |= early.evaluated
        for token in early.tokens:
            holds = self._holds[token]
            holds.discard(trace_id)
            holds.add(key)
        run.tokens |= early.tokens

    def add(self, spans: Iterable[OtlpSpan], token: object, now: float) -> list[object]:
        """Take one input's spans; returns the tokens settled at once (an input that added nothing pending)."""
        holds = self._holds.setdefault(token, set())
        for span in spans:
            key = self._key(span)
            emitted = self._emitted.get(key)
            if emitted is not None:
                late = carries_evaluation(span) and span.span_id not in emitted
                self.counts["late_feedback" if late else "spans_after_emit"] += 1
                continue
            run = self.pending.get(key)
            if run is None:
                run = self.pending[key] = PendingRun(key, now, now)
            if span.span_id in run.spans:
                self.counts["duplicate_spans"] += 1
                continue
            run.spans[span.span_id] = span
            run.last_seen = now
            if not span.parent_span_id and run.root_seen is None:
                run.root_seen = now
            if carries_evaluation(span):
                run.evaluated.add(span.span_id)
                if run.evaluated_at is None:
                    run.evaluated_at = now
            run.tokens.add(token)
            holds.add(key)
            self.counts["spans"] += 1
        if holds:
            return []
        del self._holds[token]
        return [token]

    def take_ready(self, now: float) -> tuple[list[ReadyRun], list[object]]:
        """The runs ready at ``now`` (removed from pending) and the tokens this settles."""
        ready: list[ReadyRun] = []
        for run in list(self.pending.values()):
            feedback = self._verdict(run, now)
            if feedback is not None:
                ready.append(self._take(run, feedback))
            elif not run.waiting and run.evaluated_at is None and now >= run.finished_at(self.idle_s):
                run.waiting = True
                self.counts["runs_waiting_for_feedback"] += 1
        overflow = len(self.pending) - self.max_pending
        if overflow > 0:
            for run in sorted(self.pending.values(), key=lambda r: r.first_seen)[:overflow]:
                self.counts["runs_taken_early"] += 1
                ready.append(self._take(run, f"none (over {self.max_pending} pending runs)"))
        return ready, self._settle([run.key for run in ready])

    def _verdict(self, run: PendingRun, now: float) -> str | None:
        finished = run.finished_at(self.idle_s)
        if run.evaluated_at is not None and now >= finished:
            waited = run.evaluated_at - finished
            return "with-run" if waited <= 0 else f"joined after {waited:.0f} s"
        if now >= finished + self.feedback_wait_s:
            return f"none within {self.feedback_wait_s:g} s"
        if now >= run.first_seen + self.window_s:
            return f"none (window of {self.window_s:g} s ended)"
        return None

    def _take(self, run: PendingRun, feedback: str) -> ReadyRun:
        del self.pending[run.key]
        self._emitted[run.key] = frozenset(run.evaluated) if run.evaluated else _NONE
        while len(self._emitted) > self.remember:
            self._emitted.popitem(last=False)
        spans = tuple(sorted(run.spans.values(), key=lambda s: (s.start_ns, s.span_id)))
        return ReadyRun(run.key, spans, feedback)

    def _settle(self, keys: list[str]) -> list[object]:
        settled = []
        gone = set(keys)
        for token, holds in list(self._holds.items()):
            if holds & gone:
                holds -= gone
                if not holds:
                    del self._holds[token]
                    settled.append(token)
        return settled

    def reset(self) -> list[object]:
        """Forget every pending run (a stage lost partitions: their inputs will be delivered again, to whoever owns
        them next); returns the tokens still held, whose inputs must be delivered again too. Emitted runs stay
        remembered, so spans redelivered for them are still dropped."""
        held = list(self._holds)
        self.pending.clear()
        self._holds.clear()
        self._alias.clear()
        return held


_NONE: frozenset[str] = frozenset()
