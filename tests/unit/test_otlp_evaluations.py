"""OpenInference runs through the one OTLP mapping and the assembler (``combee_core.otlp``): evaluations read from
``evaluations.N.evaluation.*`` span attributes (and the annotation terms, trace scope, and post-hoc carrier spans
linked to the run) as from ``gen_ai.evaluation.result`` events; masked content (``"__REDACTED__"``) read as no
content; late feedback counted only when it is late; runs waiting for feedback counted and said once."""

from __future__ import annotations

import logging

import pytest

from combee_core.otlp.mapping import UnmappableTrace, map_trace
from combee_core.otlp.processor import OtlpIngest
from combee_core.otlp.wire import OtlpEvent, OtlpSpan
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings

LESSON = "LESSON[dates]: use UTC."


def _oi_run(trace: int, *, evaluation: dict | None = None, masked: bool = False) -> list[OtlpSpan]:
    """An OpenInference run: a CHAIN root span and an LLM span under it (as openinference-instrumentation makes)."""
    trace_id, root = f"{trace:032x}", f"{trace:08x}00000001"
    value = (lambda text: "__REDACTED__") if masked else (lambda text: text)
    llm = {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
           "llm.output_messages.0.message.role": "assistant"}
    if not masked:  # OPENINFERENCE_HIDE_INPUTS/_OUTPUTS drop the messages and mask input.value/output.value
        llm |= {"llm.input_messages.0.message.content": f"task {trace}",
                "llm.output_messages.0.message.content": "answer"}
    chain = {"openinference.span.kind": "CHAIN", "input.value": value(f"task {trace}"), "output.value": value("answer"),
             "combee.playbook.id": "pb", **(evaluation or {})}
    return [OtlpSpan(trace_id, f"{trace:08x}00000002", root, "ChatCompletion", 2, 3, llm),
            OtlpSpan(trace_id, root, "", "agent", 1, 4, chain)]


ATTRIBUTES = {"evaluations.0.evaluation.name": "correctness", "evaluations.0.evaluation.score": 0,
              "evaluations.0.evaluation.label": "incorrect", "evaluations.0.evaluation.explanation": LESSON,
              "evaluations.0.evaluation.annotator_kind": "LLM"}


def _ingest(**values: object) -> OtlpIngest:
    return OtlpIngest.from_settings(CombeeSettings.load(env={}, **{"otlp_idle_s": 5, "otlp_feedback_wait_s": 60,
                                                                   **values}))


def test_openinference_evaluation_attributes_are_the_runs_feedback_score_and_verdict():
    trace = map_trace("k", _oi_run(1, evaluation=ATTRIBUTES))
    assert (trace.input, trace.output) == ("task 1", "answer")
    assert trace.feedback == f"correctness: incorrect 0\n{LESSON}" and trace.score == 0.0 and trace.success is False


@pytest.mark.parametrize("prefix", ["annotations.0.annotation", "trace.evaluations.0.evaluation",
                                    "trace.annotations.3.annotation", "session.evaluations.0.evaluation"])
def test_the_annotation_terms_and_the_trace_and_session_scopes_read_alike(prefix):
    evaluation = {f"{prefix}.name": "helpful", f"{prefix}.label": "pass", f"{prefix}.score": 1.0}
    trace = map_trace("k", _oi_run(1, evaluation=evaluation))
    assert trace.feedback == "helpful: pass 1" and trace.score == 1.0 and trace.success is True


def test_an_object_without_a_name_or_a_result_is_not_an_evaluation_and_both_forms_of_one_result_count_once():
    half = {"evaluations.0.evaluation.label": "pass", "evaluations.1.evaluation.name": "empty"}
    assert map_trace("k", _oi_run(1, evaluation=half)).feedback == ""
    event = OtlpEvent("gen_ai.evaluation.result", 4, {"gen_ai.evaluation.name": "correctness",
                                                      "gen_ai.evaluation.score.value": 0,
                                                      "gen_ai.evaluation.score.label": "incorrect",
                                                      "gen_ai.evaluation.explanation": LESSON})
    llm, root = _oi_run(1, evaluation=ATTRIBUTES)
    trace = map_trace("k", [llm, OtlpSpan(root.trace_id, root.span_id, "", root.name, 1, 4, root.attributes,
                                          (event,))])
    assert trace.feedback == f"correctness: incorrect 0\n{LESSON}"


def test_masked_content_is_no_content_a_dead_letter_with_that_reason():
    with pytest.raises(UnmappableTrace, match="masked at the source"):
        map_trace("k", _oi_run(1, evaluation=ATTRIBUTES, masked=True))
    ingest, log = _ingest(), EffectLog()
    log.extend(ingest.take(_oi_run(1, evaluation=ATTRIBUTES, masked=True), "r0", 0.0))
    log.extend(ingest.tick(1.0))
    [rejected] = log.rejected()
    assert "__REDACTED__" in rejected.reason and log.published("traces") == []


def test_message_contents_parts_are_read_and_masked_parts_are_not_content():
    spans = _oi_run(1)
    llm = OtlpSpan(spans[0].trace_id, spans[0].span_id, spans[0].parent_span_id, "llm", 2, 3, {
        "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.contents.0.message_content.type": "text",
        "llm.input_messages.0.message.contents.0.message_content.text": "What is 2+2?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.contents.0.message_content.text": "__REDACTED__"})
    trace = map_trace("k", [llm, OtlpSpan(spans[1].trace_id, spans[1].span_id, "", "agent", 1, 4,
                                          {"openinference.span.kind": "CHAIN", "combee.playbook.id": "pb"})])
    assert trace.input == "What is 2+2?" and trace.output == ""


def test_an_inline_openinference_evaluation_makes_the_run_ready_at_once():
    ingest, log = _ingest(), EffectLog()
    log.extend(ingest.take(_oi_run(1, evaluation=ATTRIBUTES), "r0", 0.0))
    log.extend(ingest.tick(0.5))
    [trace] = log.published("traces")
    assert trace.metadata["otlp.feedback"] == "with-run" and LESSON in trace.feedback
    assert "otlp_runs_waiting_for_feedback" not in log.counts()


def test_a_post_hoc_carrier_linked_to_the_run_joins_it_and_its_evaluator_text_is_not_the_runs():
    ingest, log = _ingest(), EffectLog()
    run = _oi_run(1)
    carrier = OtlpSpan("ff" * 16, "ee" * 8, "", "correctness evaluation", 50, 51,
                       {"openinference.span.kind": "EVALUATOR", "input.value": "judge this", "output.value": "{}",
                        **ATTRIBUTES}, linked_trace_ids=(run[0].trace_id,))
    log.extend(ingest.take(run, "r0", 0.0))
    log.extend(ingest.tick(30.0))
    assert log.published("traces") == []
    log.extend(ingest.take([carrier], "r1", 40.0))
    log.extend(ingest.tick(40.5))
    [trace] = log.published("traces")
    assert trace.trace_id == f"otel:{1:032x}" and trace.metadata["otlp.feedback"] == "joined after 40 s"
    assert (trace.input, trace.output) == ("task 1", "answer") and trace.score == 0.0
    assert log.settled() == {"r0": 1, "r1": 1}


def test_a_retry_of_a_published_runs_evaluated_root_is_not_late_feedback_but_a_new_evaluation_is():
    ingest, log = _ingest(), EffectLog()
    run = _oi_run(1, evaluation=ATTRIBUTES)
    log.extend(ingest.take(run, "r0", 0.0))
    log.extend(ingest.tick(1.0))
    for attempt in range(3):  # the exporter retried the batch after the run went on
        log.extend(ingest.take(run, f"retry{attempt}", 2.0 + attempt))
    assert "otlp_late_feedback" not in log.counts() and log.counts()["otlp_spans_after_emit"] == 6
    evaluate = OtlpSpan(run[0].trace_id, "0000000100000009", run[1].span_id, "evaluate", 9, 9,
                        {"gen_ai.operation.name": "evaluate"},
                        (OtlpEvent("gen_ai.evaluation.result", 9, {"gen_ai.evaluation.name": "late"}),))
    log.extend(ingest.take([evaluate], "late", 9.0))
    assert log.counts()["otlp_late_feedback"] == 1 and len(log.published("traces")) == 1


def test_runs_waiting_for_feedback_are_counted_each_and_said_in_one_line(caplog):
    ingest, log = _ingest(otlp_feedback_wait_s=60), EffectLog()
    with caplog.at_level(logging.WARNING, logger="combee_core.otlp.processor"):
        for n in range(3):
            log.extend(ingest.take(_oi_run(n), f"r{n}", float(n)))
            log.extend(ingest.tick(float(n) + 0.5))
        log.extend(ingest.tick(10.0))
    assert log.counts()["otlp_runs_waiting_for_feedback"] == 3 and log.published("traces") == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "finished without an evaluation" in line and "COMBEE_OTLP_FEEDBACK_WAIT_S" in line


def test_the_sdks_linked_carrier_decodes_with_its_link_and_the_receiver_writes_it_with_the_run():
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from combee_core.otlp.export import split_by_trace
    from combee_core.otlp.wire import decode_spans, encode_request
    from streams.testing.otel_agent import export_request, tracer_provider

    exporter = InMemorySpanExporter()
    tracer = tracer_provider(exporter).get_tracer("test")
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "CHAIN"}) as root:
        run = root.get_span_context()
    with tracer.start_as_current_span("judge", context=trace_api.set_span_in_context(trace_api.INVALID_SPAN),
                                      links=[trace_api.Link(run)], attributes={"openinference.span.kind": "EVALUATOR",
                                                                               **ATTRIBUTES}):
        pass
    request = export_request(exporter.get_finished_spans())
    *_, carrier = decode_spans(encode_request(request, "otlp_proto"))
    assert carrier.trace_id != f"{run.trace_id:032x}" and carrier.linked_trace_ids == (f"{run.trace_id:032x}",)
    [(key, part)] = split_by_trace(request).parts
    assert key == f"{run.trace_id:032x}" and len(decode_spans(encode_request(part, "otlp_proto"))) == 2
