"""What the OTLP/HTTP receiver decides about one request, without HTTP or Kafka: which spans it accepts (one record
per trace id, as the Collector's Kafka exporter writes with ``partition_traces_by_id``; a post-hoc evaluation's carrier
span goes with the run its link names, so that it lands in the run's partition), which it rejects (invalid ids, as the
specification lets a receiver), and the response bodies (``ExportTraceServiceResponse`` with ``partial_success``;
``google.rpc.Status`` for errors), in the request's encoding."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from combee_core.otlp.evaluations import EVALUATION_EVENT, is_feedback_key
from combee_core.otlp.wire import json_format, proto_messages

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

WireEncoding = Literal["otlp_proto", "otlp_json"]


@dataclass(frozen=True)
class SplitRequest:
    """A request split per trace id: ``(trace id hex, request holding only its spans)``, and the spans rejected."""

    parts: list[tuple[str, Any]]
    rejected: int
    reason: str


def split_by_trace(request: ExportTraceServiceRequest) -> SplitRequest:
    """One request per trace id (resource and scope kept), spans with an invalid trace or span id rejected."""
    pb = proto_messages()
    parts: dict[str, Any] = {}
    rejected = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            targets: dict[str, Any] = {}
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id) \
                        or not any(span.span_id):
                    rejected += 1
                    continue
                trace_id = run_trace_id(span)
                target = targets.get(trace_id)
                if target is None:
                    part = parts.setdefault(trace_id, pb.ExportTraceServiceRequest())
                    new_resource = part.resource_spans.add()
                    new_resource.resource.CopyFrom(resource_spans.resource)
                    new_resource.schema_url = resource_spans.schema_url
                    target = targets[trace_id] = new_resource.scope_spans.add()
                    target.scope.CopyFrom(scope_spans.scope)
                    target.schema_url = scope_spans.schema_url
                target.spans.add().CopyFrom(span)
    reason = f"{rejected} span(s) with an invalid trace id or span id" if rejected else ""
    return SplitRequest(list(parts.items()), rejected, reason)


def run_trace_id(span: Any) -> str:
    """The trace id (hex) of the run a protobuf span belongs to: its own, or for a post-hoc evaluation's carrier (one
    link, to another trace; ``combee_core.otlp.evaluations.feedback_target``) the linked one."""
    own = bytes(span.trace_id).hex()
    if len(span.links) != 1 or len(span.links[0].trace_id) != 16 or not any(span.links[0].trace_id):
        return own
    linked = bytes(span.links[0].trace_id).hex()
    carries = any(event.name == EVALUATION_EVENT for event in span.events) or any(
        is_feedback_key(item.key) for item in span.attributes)
    return linked if carries and linked != own else own


def export_response(encoding: WireEncoding, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse``; with ``partial_success`` when spans were rejected."""
    pb = proto_messages()
    response = pb.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if encoding == "otlp_json":
        return json.dumps(json_format().MessageToDict(response)).encode()
    return bytes(response.SerializeToString())


def status_body(encoding: WireEncoding, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (``code``: a gRPC status code) in the request's encoding, as OTLP/HTTP errors carry."""
    if encoding == "otlp_json":
        return json.dumps({"code": code, "message": message}).encode()
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
