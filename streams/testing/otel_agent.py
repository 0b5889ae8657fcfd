"""A toy agent instrumented with the real OpenTelemetry SDK, following the GenAI semantic conventions: for tests and
the README's example of feeding Combee Streams from OpenTelemetry.

Each run is an ``invoke_agent`` span (the run's input and output messages, Combee's playbook attributes) with a
``chat {model}`` span and an ``execute_tool`` span under it; the run's evaluation is a ``gen_ai.evaluation.result``
event, on the run's span, or later (:func:`report_evaluation`: a short span in the same trace, as an evaluator that
scores minutes afterwards would send it). The runs replay simulated traces (``combee_core.sim.task_suite``), so their
feedback carries the ``LESSON[section]: ...`` lines the offline simulator learns from.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from combee_core.models import Trace

MODEL = "toy-model"


def tracer_provider(exporter: SpanExporter, service: str = "toy-agent", *, id_generator: IdGenerator | None = None,
                    **resource: str) -> TracerProvider:
    """A provider exporting every span as it ends (``SimpleSpanProcessor``); ``id_generator``: the trace and span
    ids (None: the SDK's random ones)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}),
                              id_generator=id_generator)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


class SeededIds(IdGenerator):
    """Trace and span ids from a seeded RNG, the first trace ids as given: a test's runs get the same ids every
    time, and a test can give a run an id of a shape it must survive (a card-shaped run inside the hex)."""

    def __init__(self, seed: int, first_trace_ids: Sequence[int] = ()) -> None:
        self._rng = random.Random(seed)
        self._first = list(first_trace_ids)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._first.pop(0) if self._first else self._rng.getrandbits(128) or 1


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def evaluation_attributes(run: Trace) -> dict[str, str | float]:
    """The ``gen_ai.evaluation.result`` event's attributes for a simulated run."""
    return {"gen_ai.evaluation.name": "task-check", "gen_ai.evaluation.score.value": float(run.score or 0.0),
            "gen_ai.evaluation.score.label": "pass" if run.success else "fail",
            "gen_ai.evaluation.explanation": run.feedback}


def run_agent(provider: TracerProvider, run: Trace, *, capture_content: bool = True, evaluate: bool = True,
              used_entries: Sequence[str] = ()) -> trace_api.SpanContext:
    """Emit one run's spans; returns the run span's context (for a later :func:`report_evaluation`)."""
    tracer = provider.get_tracer("combee.toy_agent")
    content = {"gen_ai.input.messages": _messages("user", run.input),
               "gen_ai.output.messages": _messages("assistant", run.output)} if capture_content else {}
    with tracer.start_as_current_span("invoke_agent toy-agent", kind=trace_api.SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "toy-agent", "gen_ai.agent.id": run.agent_id,
            "gen_ai.conversation.id": f"conv-{run.trace_id}", "combee.playbook.id": run.playbook_id,
            "combee.playbook.version": run.playbook_version, "combee.task.id": run.task_id,
            "combee.used_entries": ",".join(used_entries), **content}) as agent_span:
        with tracer.start_as_current_span(f"chat {MODEL}", kind=trace_api.SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "gen_ai.provider.name": "toy",
                **content}):
            pass
        with tracer.start_as_current_span("execute_tool calculator", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculator",
                **({"gen_ai.tool.call.arguments": '{"expression": "1+1"}', "gen_ai.tool.call.result": "2"}
                   if capture_content else {})}):
            pass
        if evaluate:
            agent_span.add_event("gen_ai.evaluation.result", evaluation_attributes(run))
        return agent_span.get_span_context()


def report_evaluation(provider: TracerProvider, context: trace_api.SpanContext, run: Trace) -> None:
    """The run's evaluation sent after the run: an ``evaluate`` span in the run's trace carrying the event."""
    tracer = provider.get_tracer("combee.toy_agent")
    parent = trace_api.set_span_in_context(trace_api.NonRecordingSpan(context))
    with tracer.start_as_current_span("evaluate toy-agent", context=parent,
                                      attributes={"gen_ai.operation.name": "evaluate"}) as span:
        span.add_event("gen_ai.evaluation.result", evaluation_attributes(run))


def export_request(spans: Sequence[ReadableSpan]):
    """The ``ExportTraceServiceRequest`` the SDK's OTLP exporters send for ``spans`` (what the Collector's Kafka
    exporter then writes as one record)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans)


def openinference_evaluation(run: Trace) -> dict[str, str | float]:
    """The run's evaluation as OpenInference span attributes (``evaluations.0.evaluation.*``)."""
    return {"evaluations.0.evaluation.name": "task-check", "evaluations.0.evaluation.score": float(run.score or 0.0),
            "evaluations.0.evaluation.label": "pass" if run.success else "fail",
            "evaluations.0.evaluation.explanation": run.feedback, "evaluations.0.evaluation.annotator_kind": "CODE"}


def run_openinference_agent(provider: TracerProvider, run: Trace, *, evaluation: str = "attributes",
                            masked: bool = False) -> trace_api.SpanContext:
    """One run as OpenInference instrumentations trace it: a ``CHAIN`` span (``input.value`` / ``output.value``) with
    an ``LLM`` span (``llm.input_messages.N.message.*``) under it. ``evaluation``: ``attributes`` (OpenInference's
    ``evaluations.0.evaluation.*`` on the root), ``event`` (a ``gen_ai.evaluation.result`` event on it) or ``none``
    (post hoc: :func:`report_openinference_evaluation`). ``masked``: as with ``OPENINFERENCE_HIDE_INPUTS`` and
    ``_OUTPUTS`` (values ``"__REDACTED__"``, messages left out)."""
    tracer = provider.get_tracer("openinference.instrumentation.toy")
    hidden = "__REDACTED__"
    with tracer.start_as_current_span("agent", attributes={
            "openinference.span.kind": "CHAIN", "input.value": hidden if masked else run.input,
            "output.value": hidden if masked else run.output, "session.id": f"conv-{run.trace_id}",
            "combee.playbook.id": run.playbook_id, "combee.task.id": run.task_id,
            **(openinference_evaluation(run) if evaluation == "attributes" else {})}) as root:
        messages = {} if masked else {
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": run.input,
            "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": run.output}
        with tracer.start_as_current_span("ChatCompletion", kind=trace_api.SpanKind.CLIENT, attributes={
                "openinference.span.kind": "LLM", "llm.model_name": MODEL, **messages}):
            pass
        if evaluation == "event":
            root.add_event("gen_ai.evaluation.result", evaluation_attributes(run))
        return root.get_span_context()


def report_openinference_evaluation(provider: TracerProvider, context: trace_api.SpanContext, run: Trace) -> None:
    """The run's evaluation sent post hoc as OpenInference requires: an ``EVALUATOR`` carrier span in a trace of its
    own, with one span link to the run's root span."""
    tracer = provider.get_tracer("openinference.instrumentation.toy")
    attributes = {"openinference.span.kind": "EVALUATOR", "input.value": "the run's answer",
                  **openinference_evaluation(run)}
    with tracer.start_as_current_span("task-check evaluation", links=[trace_api.Link(context)], attributes=attributes,
                                      context=trace_api.set_span_in_context(trace_api.INVALID_SPAN)):
        pass
