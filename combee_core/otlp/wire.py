"""The OTLP wire format: an ``ExportTraceServiceRequest`` as protobuf (``otlp_proto``) or as OTLP/JSON
(``otlp_json``: lowerCamelCase fields, trace and span ids in hex, 64-bit integers as strings), decoded with
``opentelemetry-proto`` into plain :class:`OtlpSpan` values; and the request encoded back (tests, the receiver).

The OpenTelemetry Collector's Kafka exporter writes one such request per record (a batch of spans, not a trace), in
either encoding; the OTLP/HTTP receiver gets the same request as a body. ``opentelemetry-proto`` is imported only when
a request is decoded or encoded, so the rest of ``combee_core`` loads without the ``[otlp]`` extra.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from combee_core.errors import CombeeError, one_line

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

Encoding = Literal["auto", "otlp_proto", "otlp_json"]
AttributeValue = str | int | float | bool | bytes | list[Any] | dict[str, Any] | None

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpDecodeError(CombeeError, ValueError):
    """A record or request body is not an OTLP trace export request in the expected encoding."""


class OtlpMissing(CombeeError, ImportError):
    """The ``[otlp]`` extra (``opentelemetry-proto``) is not installed."""


@dataclass(frozen=True)
class OtlpEvent:
    """A span event: its name, time (ns since the epoch) and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class OtlpSpan:
    """One span with its resource's attributes: what the mapping reads."""

    trace_id: str
    """32 lowercase hex digits."""
    span_id: str
    """16 lowercase hex digits."""
    parent_span_id: str
    """16 hex digits, or empty for a root span."""
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: tuple[OtlpEvent, ...] = ()
    resource: dict[str, AttributeValue] = field(default_factory=dict)
    linked_trace_ids: tuple[str, ...] = ()
    """The trace ids of the span's links, in order (a post-hoc evaluation's carrier links the run it is about)."""

    def attribute(self, name: str) -> AttributeValue:
        """The span's attribute, else its resource's (None when neither has it)."""
        value = self.attributes.get(name)
        return self.resource.get(name) if value is None else value


def proto_messages() -> Any:
    """``opentelemetry-proto``'s trace service messages; :class:`OtlpMissing` without the ``[otlp]`` extra."""
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError as error:  # pragma: no cover - the extra is part of [test]
        raise OtlpMissing("OTLP ingest needs the [otlp] extra: pip install 'combee-streams[otlp]'") from error
    return trace_service_pb2


def json_format() -> Any:
    """protobuf's JSON mapping (installed with ``opentelemetry-proto``)."""
    from google.protobuf import json_format

    return json_format


def detect_encoding(raw: bytes) -> Literal["otlp_proto", "otlp_json"]:
    """JSON when the first non-blank byte is ``{`` (a protobuf request never starts so: field 15, wire type 3)."""
    return "otlp_json" if raw.lstrip()[:1] == b"{" else "otlp_proto"


def _ids(document: Any, convert: Callable[[str], str]) -> None:
    """Rewrite the id fields of every span and link of an OTLP/JSON document in place."""
    for resource_spans in document.get("resourceSpans", ()) if isinstance(document, dict) else ():
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for item in (span, *span.get("links", ())):
                    for name in _ID_FIELDS:
                        if isinstance(item.get(name), str) and item[name]:
                            item[name] = convert(item[name])


def _hex_to_base64(value: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    except ValueError as error:
        raise OtlpDecodeError(f"id {value[:40]!r} is not hex (OTLP/JSON ids are hex strings)") from error


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def decode_request(raw: bytes, encoding: Encoding = "auto") -> ExportTraceServiceRequest:
    """``raw`` as an ``ExportTraceServiceRequest``; :class:`OtlpDecodeError` saying why it is not one, whatever the
    bytes hold (deep nesting, a value of the wrong type, invalid UTF-8): both OTLP doors answer it with a dead letter
    or a 400, never a stopped stage or a 500."""
    pb = proto_messages()  # OtlpMissing (no [otlp] extra) is the installation's fault, not the record's
    try:
        return _decode_request(pb, raw, encoding)
    except OtlpDecodeError:
        raise
    except Exception as error:  # hostile bytes: any failure to read them is about them (AttributeError or
        # TypeError from a value of the wrong type where the mapping expects an object, RecursionError ...)
        raise OtlpDecodeError(f"not an OTLP trace request: {one_line(error)}") from error


def _decode_request(pb: Any, raw: bytes, encoding: Encoding) -> ExportTraceServiceRequest:
    chosen = detect_encoding(raw) if encoding == "auto" else encoding
    request: ExportTraceServiceRequest = pb.ExportTraceServiceRequest()
    if chosen == "otlp_json":
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise OtlpDecodeError(f"not OTLP/JSON: {error}") from error
        except RecursionError as error:
            raise OtlpDecodeError("not OTLP/JSON: nested too deeply to read") from error
        if not isinstance(document, dict):
            raise OtlpDecodeError("not OTLP/JSON: the document is not an object")
        _ids(document, _hex_to_base64)
        try:
            json_format().ParseDict(document, request, ignore_unknown_fields=True)
        except Exception as error:  # json_format.ParseError and the TypeErrors/ValueErrors it lets through
            raise OtlpDecodeError(f"not an OTLP/JSON trace request: {one_line(error)}") from error
        return request
    try:
        request.ParseFromString(raw)
    except Exception as error:  # google.protobuf.message.DecodeError (its class differs per protobuf backend)
        raise OtlpDecodeError(f"not an OTLP protobuf trace request: {error}") from error
    return request


def encode_request(request: ExportTraceServiceRequest, encoding: Literal["otlp_proto", "otlp_json"]) -> bytes:
    """The request as the Collector's Kafka exporter writes it: protobuf bytes, or OTLP/JSON with hex ids."""
    if encoding == "otlp_proto":
        return bytes(request.SerializeToString())
    document = json_format().MessageToDict(request, use_integers_for_enums=True)
    _ids(document, _base64_to_hex)
    return json.dumps(document, separators=(",", ":")).encode()


def any_value(value: Any) -> AttributeValue:
    """An OTLP ``AnyValue`` as a Python value (bytes stay bytes; arrays are lists, kvlists dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: any_value(item.value) for item in value.kvlist_value.values}
    result: AttributeValue = getattr(value, kind)
    return result


def _attributes(items: Any) -> dict[str, AttributeValue]:
    return {item.key: any_value(item.value) for item in items}


def iter_spans(request: ExportTraceServiceRequest) -> Iterator[OtlpSpan]:
    """Every span of the request, with its resource's attributes, in the request's order."""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield OtlpSpan(
                    trace_id=binascii.hexlify(span.trace_id).decode(),
                    span_id=binascii.hexlify(span.span_id).decode(),
                    parent_span_id=binascii.hexlify(span.parent_span_id).decode(),
                    name=span.name,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes=_attributes(span.attributes),
                    events=tuple(OtlpEvent(event.name, event.time_unix_nano, _attributes(event.attributes))
                                 for event in span.events),
                    resource=resource,
                    linked_trace_ids=tuple(binascii.hexlify(link.trace_id).decode() for link in span.links),
                )


def decode_spans(raw: bytes, encoding: Encoding = "auto") -> list[OtlpSpan]:
    """The spans of one record or body; :class:`OtlpDecodeError` when it is not an OTLP trace request."""
    request = decode_request(raw, encoding)
    try:
        return list(iter_spans(request))
    except Exception as error:  # as decode_request's: a request protobuf accepted but that cannot be read
        raise OtlpDecodeError(f"unreadable spans: {one_line(error)}") from error
