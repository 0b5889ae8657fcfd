"""One run's spans -> one :class:`~combee_core.models.Trace`: the single mapping both OTLP doors use.

It reads the OpenTelemetry GenAI semantic conventions (``gen_ai.*`` attributes; ``invoke_agent``, ``chat {model}``
and ``execute_tool`` spans; messages as ``gen_ai.input.messages`` / ``gen_ai.output.messages`` attributes or on the
``gen_ai.client.inference.operation.details`` event; scores as ``gen_ai.evaluation.result`` events) and
OpenInference (``openinference.span.kind``, ``llm.input_messages.N.message.role/content`` or its
``.contents.M.message_content.text`` parts, ``input.value`` / ``output.value``; scores as
``evaluations.N.evaluation.*`` attributes: ``combee_core.otlp.evaluations``), and Combee's own attributes
(``combee.playbook.id`` ...; ``docs/protocol.md``, "OpenTelemetry"). A run whose spans carry no message content
(content capture off at the source, the conventions' default, or masked: OpenInference's ``"__REDACTED__"``) cannot
be learned from: :class:`UnmappableTrace` says so, and the stage dead-letters it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from combee_core import limits
from combee_core.errors import CombeeError, one_line
from combee_core.models import Trace, TraceStep
from combee_core.otlp.evaluations import OI_KIND, REDACTED, Evaluation, evaluations, is_carrier
from combee_core.otlp.evaluations import text as _text
from combee_core.otlp.wire import AttributeValue, OtlpSpan

PLAYBOOK_ID = "combee.playbook.id"
PLAYBOOK_VERSION = "combee.playbook.version"
USED_ENTRIES = "combee.used_entries"
TASK_ID = "combee.task.id"
"""Combee's attributes, on a span or its resource (the span's win): which playbook (and version) the run used, the
entry ids it used (comma-separated, or a string array), and the task's id."""

OPERATION = "gen_ai.operation.name"
CONVERSATION = "gen_ai.conversation.id"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
OI_SESSION = "session.id"

_LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]*$")
_PLAYBOOK_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OI_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(role|content|contents\.(\d+)\."
                         r"message_content\.text)$")
_PASS = {"pass", "passed", "correct", "success", "succeeded", "true", "good", "yes"}
_FAIL = {"fail", "failed", "incorrect", "failure", "false", "bad", "no", "wrong"}


class UnmappableTrace(CombeeError, ValueError):
    """A run's spans cannot make a trace; the message is the dead letter's reason."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    tool: str | None = None


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return _text(part)
    kind = part.get("type", "text")
    if kind == "text" or "content" in part:
        return _text(part.get("content"))
    if kind == "tool_call":
        return f"call {part.get('name', '?')}({_text(part.get('arguments'))})"
    if kind == "tool_call_response":
        return f"result: {_text(part.get('response', part.get('result')))}"
    return ""


def _messages_of(value: AttributeValue) -> list[Message]:
    """GenAI messages (a JSON string or array of ``{role, parts: [...]}``; ``content`` instead of parts is read too)."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return [Message("user", _text(value))] if value else []
    if isinstance(value, dict):
        value = [value]
    found = []
    for item in value if isinstance(value, list) else ():
        if not isinstance(item, dict):
            continue
        parts = item.get("parts")
        text = ("\n".join(t for t in map(_part_text, parts) if t) if isinstance(parts, list)
                else _text(item.get("content")))
        if text:
            found.append(Message(str(item.get("role") or "user")[:64], text))
    return found


def _openinference_messages(span: OtlpSpan, direction: str) -> list[Message]:
    by_index: dict[int, dict[str, str]] = {}
    texts: dict[int, dict[int, str]] = {}
    for key, value in span.attributes.items():
        match = _OI_MESSAGE.match(key)
        if match and match.group(1) == direction:
            if match.group(4) is not None:  # message.contents.M.message_content.text: one part of a message
                texts.setdefault(int(match.group(2)), {})[int(match.group(4))] = _text(value)
            else:
                by_index.setdefault(int(match.group(2)), {})[match.group(3)] = _text(value)
    for index, parts in texts.items():
        slot = by_index.setdefault(index, {})
        if not slot.get("content"):
            slot["content"] = "\n".join(part for _, part in sorted(parts.items()) if part)
    return [Message(parts.get("role", "user")[:64] or "user", parts["content"])
            for _, parts in sorted(by_index.items()) if parts.get("content")]


def span_messages(span: OtlpSpan, direction: str) -> list[Message]:
    """The span's input or output messages, from whichever convention carries them (empty when none does)."""
    name = f"gen_ai.{direction}.messages"
    found = _messages_of(span.attributes.get(name))
    if not found:
        for event in span.events:
            if event.name == DETAILS_EVENT:
                found = _messages_of(event.attributes.get(name))
                if found:
                    break
    if not found:
        found = _openinference_messages(span, direction)
    if not found and (value := _text(span.attributes.get(f"{direction}.value"))):
        found = [Message("user" if direction == "input" else "assistant", value)]
    return found


def kind(span: OtlpSpan) -> str:
    """``agent``, ``llm``, ``tool`` or ``other``, by the GenAI operation or the OpenInference span kind."""
    operation = str(span.attributes.get(OPERATION) or "")
    oi_kind = str(span.attributes.get(OI_KIND) or "").upper()
    if operation in ("invoke_agent", "create_agent") or oi_kind == "AGENT":
        return "agent"
    if operation in _LLM_OPERATIONS or oi_kind == "LLM":
        return "llm"
    if operation == "execute_tool" or oi_kind == "TOOL":
        return "tool"
    return "other"


def is_genai(span: OtlpSpan) -> bool:
    """The span follows one of the conventions the mapping reads."""
    return kind(span) != "other" or OI_KIND in span.attributes or any(key.startswith(("gen_ai.", "llm."))
                                                                       for key in span.attributes)


def conversation_id(span: OtlpSpan) -> str | None:
    """The span's conversation (``gen_ai.conversation.id``, or OpenInference's ``session.id``)."""
    value = span.attributes.get(CONVERSATION) or span.attributes.get(OI_SESSION)
    return _text(value) or None


def _identifier(raw: str, fallback_prefix: str) -> str:
    """``raw`` when it is a valid identifier, else a readable prefix of it plus a digest."""
    if _ID_PATTERN.match(raw) and len(raw) <= limits.MAX_ID_CHARS:
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9._:@/-]", "_", raw)[:64].lstrip("._:@/-")
    return f"{cleaned or fallback_prefix}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def _first(spans: Sequence[OtlpSpan], name: str) -> AttributeValue:
    for span in spans:
        value = span.attribute(name)
        if value is not None and value != "":
            return value
    return None


def _used_entries(value: AttributeValue) -> str:
    if isinstance(value, list):
        return ",".join(_text(item) for item in value)
    return _text(value)


def _steps(spans: Sequence[OtlpSpan]) -> list[TraceStep]:
    steps: list[TraceStep] = []
    seen: set[tuple[str, str]] = set()
    for span in spans:
        span_kind = kind(span)
        if span_kind == "tool":
            name = _text(span.attributes.get("gen_ai.tool.name") or span.attributes.get("tool.name")) or span.name
            arguments = _text(span.attributes.get("gen_ai.tool.call.arguments") or span.attributes.get("input.value"))
            result = _text(span.attributes.get("gen_ai.tool.call.result") or span.attributes.get("output.value"))
            steps.append(TraceStep(role="tool", tool=name[:128],
                                   content=f"arguments: {arguments}\nresult: {result}"[: limits.MAX_STEP_CHARS]))
        elif span_kind == "llm":
            system = _text(span.attributes.get("gen_ai.system_instructions"))
            messages = ([Message("system", system)] if system else []) + span_messages(span, "input")
            for message in [*messages, *span_messages(span, "output")]:
                if (message.role, message.content) not in seen:  # a chat's history repeats the earlier turns
                    seen.add((message.role, message.content))
                    steps.append(TraceStep(role=message.role, content=message.content[: limits.MAX_STEP_CHARS]))
    return steps[-limits.MAX_STEPS:]


def _feedback(found: Sequence[Evaluation]) -> str:
    lines = []
    for evaluation in found:
        verdict = " ".join(x for x in (evaluation.label, "" if evaluation.score is None else f"{evaluation.score:g}")
                           if x)
        lines.append(f"{evaluation.name}: {verdict}".rstrip(": ") if verdict else evaluation.name)
        if evaluation.explanation:
            lines.append(evaluation.explanation)
    return "\n".join(lines)[: limits.MAX_FEEDBACK_CHARS]


def _success(found: Sequence[Evaluation]) -> bool | None:
    labels = [e.label.strip().lower() for e in found if e.label]
    if any(label in _FAIL for label in labels):
        return False
    if any(label in _PASS for label in labels):
        return True
    return None


def playbook_of(spans: Sequence[OtlpSpan]) -> str | None:
    """The first valid ``combee.playbook.id`` of the spans (or their resources), if any."""
    for span in spans:
        value = _text(span.attribute(PLAYBOOK_ID))
        if _PLAYBOOK_PATTERN.match(value) and len(value) <= limits.MAX_PLAYBOOK_ID_CHARS:
            return value
    return None


def trace_id_for(key: str) -> str:
    """The Combee ``trace_id`` of the run keyed ``key``: ``otel:<trace id hex>`` (or ``otel:conv:<id>``)."""
    return _identifier(f"otel:{key}", "otel")


def map_trace(key: str, spans: Sequence[OtlpSpan], *, default_playbook: str | None = None,
              metadata: dict[str, str | int | float | bool | None] | None = None) -> Trace:
    """The trace of one run (``key``: its OTel trace id, or ``conv:<conversation id>``) from its spans.

    :class:`UnmappableTrace` when the spans follow no GenAI convention, carry no message content, or name no
    playbook (and there is no ``default_playbook``), and for any other failure to read them (an attribute nested
    too deeply, a time out of range): the stage dead-letters the run and goes on."""
    try:
        return _map_trace(key, spans, default_playbook=default_playbook, metadata=metadata)
    except UnmappableTrace:
        raise
    except Exception as error:  # spans are data the sender chose: any failure to map them is about them
        raise UnmappableTrace(f"trace {key}: cannot be mapped: {one_line(error)}") from error


def _map_trace(key: str, spans: Sequence[OtlpSpan], *, default_playbook: str | None,
               metadata: dict[str, str | int | float | bool | None] | None) -> Trace:
    ordered = sorted(spans, key=lambda span: (span.start_ns, span.span_id))
    trace_id = trace_id_for(key)
    run = [s for s in ordered if not is_carrier(s)]  # an evaluator's spans: their input and output are not the run's
    if not any(is_genai(span) for span in run):
        raise UnmappableTrace(f"trace {key}: no span follows the GenAI or OpenInference conventions")
    roots = [s for s in run if kind(s) == "agent"] or [s for s in run if not s.parent_span_id] or run
    llm_spans = [s for s in run if kind(s) == "llm"]
    inputs = [m for s in (*roots, *llm_spans) for m in span_messages(s, "input") if m.role in ("user", "human")]
    outputs = [m for s in (*llm_spans, *roots) for m in span_messages(s, "output")]
    if not inputs and not outputs and any(value == REDACTED for s in run for value in s.attributes.values()):
        raise UnmappableTrace(
            f"trace {key}: its message content is masked at the source (OpenInference's \"{REDACTED}\": "
            "OPENINFERENCE_HIDE_INPUTS / _OUTPUTS / _INPUT_TEXT / _OUTPUT_TEXT are on); nothing to learn from")
    if not inputs and not outputs:
        raise UnmappableTrace(
            f"trace {key}: no message content (content capture is off at the source: set "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, or record gen_ai.input.messages / "
            "gen_ai.output.messages); nothing to learn from")
    playbook = _text(_first(roots, PLAYBOOK_ID) or _first(ordered, PLAYBOOK_ID)) or default_playbook or ""
    if not _PLAYBOOK_PATTERN.match(playbook) or len(playbook) > limits.MAX_PLAYBOOK_ID_CHARS:
        raise UnmappableTrace(f"trace {key}: no valid {PLAYBOOK_ID} on its spans or resource ({playbook[:40]!r}), "
                              "and no default playbook (COMBEE_OTLP_DEFAULT_PLAYBOOK)")
    version_raw = _first(ordered, PLAYBOOK_VERSION)
    try:
        version = int(version_raw) if version_raw is not None else 0  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise UnmappableTrace(f"trace {key}: {PLAYBOOK_VERSION} {version_raw!r} is not an integer") from error
    agent = _text(_first(roots, "gen_ai.agent.id") or _first(ordered, "gen_ai.agent.name")
                  or _first(ordered, "service.name")) or "otel-agent"
    conversation = next((c for c in map(conversation_id, ordered) if c), None)
    task = _text(_first(ordered, TASK_ID)) or conversation or key
    found = evaluations(ordered)
    scores = [e.score for e in found if e.score is not None]
    extra: dict[str, str | int | float | bool | None] = {"source": "otlp", "otlp.spans": len(ordered)}
    if used := _used_entries(_first(ordered, USED_ENTRIES)):
        extra["used_entries"] = used[: limits.MAX_METADATA_VALUE_CHARS]
    if conversation:
        extra["otlp.conversation_id"] = conversation[: limits.MAX_METADATA_VALUE_CHARS]
    extra.update(metadata or {})
    try:
        return Trace(
            trace_id=trace_id, playbook_id=playbook, playbook_version=version, agent_id=_identifier(agent, "agent"),
            task_id=_identifier(task, "task"),
            input=(inputs[0].content if inputs else "")[: limits.MAX_TRACE_TEXT_CHARS],
            output=(outputs[-1].content if outputs else "")[: limits.MAX_TRACE_TEXT_CHARS],
            feedback=_feedback(found), score=sum(scores) / len(scores) if scores else None, success=_success(found),
            steps=_steps(run), metadata=extra,
            created_at=datetime.fromtimestamp(ordered[0].start_ns / 1e9, UTC),
        )
    except ValueError as error:  # pydantic's ValidationError: a value out of the Trace's bounds
        problems = "; ".join(str(line).strip() for line in str(error).splitlines()[1:3])
        raise UnmappableTrace(f"trace {key}: does not make a valid Trace: {problems}") from error
