"""Spans assembled into runs (``combee_core.otlp.assembler``) and the ingest-otlp processor's effects: one trace
per run whatever the batching, retried spans dropped, the delayed-feedback join bounded, inputs settled once."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.otlp.assembler import TraceAssembler
from combee_core.otlp.processor import OtlpIngest
from combee_core.otlp.wire import OtlpEvent, OtlpSpan
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings

EVALUATION = OtlpEvent("gen_ai.evaluation.result", 5, {"gen_ai.evaluation.name": "check",
                                                       "gen_ai.evaluation.score.value": 0.0,
                                                       "gen_ai.evaluation.explanation": "LESSON[dates]: use UTC."})


def _run(trace: int, *, evaluated: bool = True, late_evaluation: bool = False, conversation: str = "",
         content: bool = True) -> list[OtlpSpan]:
    """A run's spans: root agent span, a chat span, and optionally a later evaluation span."""
    trace_id = f"{trace:032x}"
    messages = {"gen_ai.input.messages": json.dumps([{"role": "user", "content": f"task {trace}"}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "answer"}])} if content else {}
    common = {"combee.playbook.id": "pb", **({"gen_ai.conversation.id": conversation} if conversation else {})}
    spans = [
        OtlpSpan(trace_id, f"{trace:08x}00000002", f"{trace:08x}00000001", "chat m", 2, 3,
                 {"gen_ai.operation.name": "chat", **messages}, resource={"combee.playbook.id": "pb"}),
        OtlpSpan(trace_id, f"{trace:08x}00000001", "", "invoke_agent a", 1, 4,
                 {"gen_ai.operation.name": "invoke_agent", **common, **messages},
                 (EVALUATION,) if evaluated and not late_evaluation else ()),
    ]
    if late_evaluation:
        spans.append(OtlpSpan(trace_id, f"{trace:08x}00000003", f"{trace:08x}00000001", "evaluate", 9, 9,
                              {"gen_ai.operation.name": "evaluate"}, (EVALUATION,)))
    return spans


def _ingest(**values: object) -> OtlpIngest:
    return OtlpIngest.from_settings(CombeeSettings.load(env={}, **{"otlp_idle_s": 5, "otlp_feedback_wait_s": 60,
                                                                   **values}))


def test_a_run_split_over_records_is_one_trace_and_its_records_settle_only_when_it_is_published():
    ingest, log = _ingest(), EffectLog()
    chat, root = _run(1)
    log.extend(ingest.take([chat], "r0", 0.0))
    assert log.extend(ingest.tick(1.0)) == [] and log.settled() == {}  # root not seen: not finished, r0 held
    log.extend(ingest.take([root], "r1", 2.0))
    log.extend(ingest.tick(2.0))
    [trace] = log.published("traces")
    assert trace.trace_id == f"otel:{1:032x}" and trace.metadata["otlp.feedback"] == "with-run"
    assert log.settled() == {"r0": 1, "r1": 1}


def test_a_retried_export_is_dropped_and_counted_not_learned_twice():
    ingest, log = _ingest(), EffectLog()
    spans = _run(1)
    log.extend(ingest.take(spans, "r0", 0.0))
    log.extend(ingest.take(spans, "r1", 0.5))  # the exporter retried the same batch
    log.extend(ingest.tick(1.0))
    log.extend(ingest.take(spans, "r2", 3.0))  # and again, after the trace went on
    assert len(log.published("traces")) == 1
    assert log.counts()["otlp_duplicate_spans"] == 2 and "otlp_late_feedback" not in log.counts()
    assert log.counts()["otlp_spans_after_emit"] == 2  # the retried root's evaluation was the run's: not late
    assert log.settled() == {"r0": 1, "r1": 1, "r2": 1}


def test_feedback_arriving_minutes_later_is_joined_within_the_wait():
    ingest, log = _ingest(otlp_feedback_wait_s=300), EffectLog()
    *run, evaluation = _run(1, late_evaluation=True)
    log.extend(ingest.take(run, "r0", 0.0))
    log.extend(ingest.tick(200.0))
    assert log.published("traces") == []
    log.extend(ingest.take([evaluation], "r1", 240.0))
    log.extend(ingest.tick(240.5))
    [trace] = log.published("traces")
    assert trace.metadata["otlp.feedback"] == "joined after 240 s" and "LESSON[dates]" in trace.feedback
    assert trace.score == 0.0


def test_without_feedback_the_trace_goes_on_after_the_wait_and_says_so():
    ingest, log = _ingest(otlp_feedback_wait_s=60), EffectLog()
    log.extend(ingest.take(_run(1, evaluated=False), "r0", 0.0))
    log.extend(ingest.tick(59.0))
    assert log.published("traces") == []
    log.extend(ingest.tick(60.0))
    [trace] = log.published("traces")
    assert trace.metadata["otlp.feedback"] == "none within 60 s" and trace.feedback == "" and trace.score is None
    assert log.counts()["otlp_traces_without_feedback"] == 1


def test_a_run_without_its_root_span_is_finished_by_idleness():
    ingest, log = _ingest(otlp_idle_s=5), EffectLog()
    chat, _ = _run(1)
    log.extend(ingest.take([chat], "r0", 0.0))
    log.extend(ingest.tick(64.0))
    assert log.published("traces") == []
    log.extend(ingest.tick(65.0))  # idle 5 s + feedback wait 60 s
    assert len(log.published("traces")) == 1


def test_content_capture_off_is_a_dead_letter_with_the_reason():
    ingest, log = _ingest(), EffectLog()
    log.extend(ingest.take(_run(1, content=False), "r0", 0.0))
    log.extend(ingest.tick(1.0))
    [rejected] = log.rejected()
    assert "content capture is off" in rejected.reason and rejected.playbook_id == "pb"
    assert log.published("traces") == [] and log.settled() == {"r0": 1}


def test_over_max_pending_the_oldest_run_goes_on_early_and_says_why():
    ingest, log = _ingest(otlp_max_pending=2), EffectLog()
    for n in range(3):
        log.extend(ingest.take(_run(n, evaluated=False), f"r{n}", float(n)))
    log.extend(ingest.tick(3.0))
    [trace] = log.published("traces")
    assert trace.trace_id == f"otel:{0:032x}" and trace.metadata["otlp.feedback"] == "none (over 2 pending runs)"


def test_grouping_by_conversation_joins_the_runs_of_a_conversation():
    ingest, log = _ingest(otlp_group_by="conversation", otlp_feedback_wait_s=0), EffectLog()
    log.extend(ingest.take(_run(1, conversation="c-9")[:1], "r0", 0.0))  # a chat span before the conversation is known
    log.extend(ingest.take(_run(1, conversation="c-9")[1:] + _run(2, conversation="c-9"), "r1", 0.5))
    log.extend(ingest.tick(1.0))
    [trace] = log.published("traces")
    assert trace.trace_id == "otel:conv:c-9" and trace.metadata["otlp.spans"] == 4
    assert log.settled() == {"r0": 1, "r1": 1}


def test_reset_returns_the_held_records_and_forgets_pending_runs():
    ingest = _ingest()
    ingest.take(_run(1, evaluated=False), "r0", 0.0)
    ingest.take(_run(2)[:1], "r1", 0.0)
    assert sorted(ingest.reset()) == ["r0", "r1"] and ingest.assembler.pending == {}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_batching_with_retries_gives_one_trace_per_run_and_settles_every_record_once(data):
    """Spans of 4 runs cut into records in any order, some records sent twice: every run is published exactly
    once, with all its spans, and every record is acknowledged exactly once."""
    spans = [span for n in range(4) for span in _run(n, late_evaluation=n % 2 == 1)]
    order = data.draw(st.permutations(spans))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(order) - 1), max_size=6)))
    records = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    retried = data.draw(st.sets(st.integers(0, len(records) - 1)))
    ingest, log, now = TraceAssembler(), EffectLog(), 0.0
    processor = OtlpIngest(ingest)
    for index, record in enumerate(records):
        for copy in range(2 if index in retried else 1):
            log.extend(processor.take(record, (index, copy), now))
            now += 0.1
    log.extend(processor.tick(now + 1.0))
    traces = log.published("traces")
    assert sorted(t.trace_id for t in traces) == sorted(f"otel:{n:032x}" for n in range(4))
    assert all(t.metadata["otlp.spans"] == (3 if t.trace_id.endswith(("1", "3")) else 2) for t in traces)
    expected = {(i, c): 1 for i in range(len(records)) for c in range(2 if i in retried else 1)}
    assert log.settled() == expected
