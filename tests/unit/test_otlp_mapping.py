"""The one OTLP mapping (``combee_core.otlp``): the wire format read with opentelemetry-proto, GenAI and
OpenInference spans mapped to a Trace, and what cannot be learned from refused with its reason."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core.otlp.mapping import UnmappableTrace, map_trace
from combee_core.otlp.wire import OtlpDecodeError, OtlpEvent, OtlpSpan, decode_spans, encode_request
from combee_core.sim.task_suite import build_suite, train_traces
from streams.testing.otel_agent import export_request, run_agent, tracer_provider

RUNS = train_traces(build_suite(seed=7), 4, playbook_ids=("pb",), run_seed=3, agents=2)
FAILED = next(run for run in RUNS if not run.success)


def _sdk_spans(**kwargs: object):
    exporter = InMemorySpanExporter()
    run_agent(tracer_provider(exporter), FAILED, used_entries=("e1", "e7"), **kwargs)  # type: ignore[arg-type]
    return exporter.get_finished_spans()


def test_protobuf_and_json_records_decode_to_the_same_spans_with_hex_ids():
    request = export_request(_sdk_spans())
    proto, as_json = encode_request(request, "otlp_proto"), encode_request(request, "otlp_json")
    span = json.loads(as_json)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16) and len(span["spanId"]) == 16  # hex, as pdata
    assert decode_spans(proto) == decode_spans(as_json) == decode_spans(as_json, "otlp_json")
    assert {s.name for s in decode_spans(proto)} == {"invoke_agent toy-agent", "chat toy-model",
                                                      "execute_tool calculator"}


@pytest.mark.parametrize("raw", [b"\xff\x00garbage", b'{"resourceSpans": [{"scopeSpans": [{"spans": '
                                                                  b'[{"traceId": "zz"}]}]}]}', b"[1, 2]"])
def test_what_is_not_an_otlp_trace_request_is_a_decode_error(raw):
    with pytest.raises(OtlpDecodeError):
        decode_spans(raw)


def test_a_genai_run_maps_to_one_trace_with_its_playbook_feedback_and_used_entries():
    spans = decode_spans(encode_request(export_request(_sdk_spans()), "otlp_proto"))
    trace = map_trace(spans[0].trace_id, spans, metadata={"otlp.feedback": "with-run"})
    assert (trace.playbook_id, trace.playbook_version, trace.task_id) == ("pb", 0, FAILED.task_id)
    assert (trace.input, trace.output, trace.agent_id) == (FAILED.input, FAILED.output, FAILED.agent_id)
    assert trace.trace_id == f"otel:{spans[0].trace_id}"
    assert "LESSON[" in trace.feedback and FAILED.feedback in trace.feedback
    assert trace.score == FAILED.score and trace.success is False
    assert trace.metadata["used_entries"] == "e1,e7" and trace.metadata["otlp.feedback"] == "with-run"
    assert [step.role for step in trace.steps] == ["user", "assistant", "tool"]
    assert trace.steps[-1].tool == "calculator"


def test_content_capture_off_is_refused_with_that_reason_not_an_empty_lesson():
    spans = decode_spans(encode_request(export_request(_sdk_spans(capture_content=False)), "otlp_proto"))
    with pytest.raises(UnmappableTrace, match="content capture is off"):
        map_trace(spans[0].trace_id, spans)


def _span(span_id: str, attributes: dict, *, parent: str = "", events: tuple[OtlpEvent, ...] = (),
          resource: dict | None = None) -> OtlpSpan:
    return OtlpSpan("ab" * 16, span_id, parent, "span", 1_700_000_000_000_000_000 + int(span_id, 16), 0,
                    attributes, events, resource or {})


def test_openinference_messages_and_playbook_from_the_resource_map_too():
    llm = _span("0000000000000002", {
        "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Be brief.", "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "What is 2+2?", "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "4", "session.id": "s-1"}, parent="0000000000000001",
        resource={"combee.playbook.id": "support", "combee.playbook.version": 3})
    agent = _span("0000000000000001", {"openinference.span.kind": "AGENT", "input.value": "What is 2+2?"},
                  resource={"combee.playbook.id": "support", "combee.playbook.version": 3})
    trace = map_trace("k", [llm, agent])
    assert (trace.playbook_id, trace.playbook_version, trace.input, trace.output) == ("support", 3, "What is 2+2?",
                                                                                      "4")
    assert [s.role for s in trace.steps] == ["system", "user", "assistant"] and trace.task_id == "s-1"


def test_messages_on_the_inference_details_event_are_read():
    details = OtlpEvent("gen_ai.client.inference.operation.details", 1, {
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "tool_call", "name": "lookup", "arguments": {"q": 1}}]}])})
    chat = _span("0000000000000001", {"gen_ai.operation.name": "chat", "combee.playbook.id": "pb"},
                 events=(details,))
    trace = map_trace("k", [chat])
    assert trace.input == "hi" and trace.output == 'call lookup({"q": 1})'


def test_a_run_without_a_playbook_is_refused_unless_a_default_is_set():
    chat = _span("0000000000000001", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "hello"})
    with pytest.raises(UnmappableTrace, match="combee.playbook.id"):
        map_trace("k", [chat])
    assert map_trace("k", [chat], default_playbook="fallback").playbook_id == "fallback"


def test_spans_of_no_genai_convention_are_refused():
    with pytest.raises(UnmappableTrace, match="GenAI or OpenInference"):
        map_trace("k", [_span("0000000000000001", {"http.method": "GET"})])
