"""A run's evaluations, in either form the conventions give them, and which run a span's feedback is about.

- **OpenTelemetry GenAI**: one ``gen_ai.evaluation.result`` event per result (``gen_ai.evaluation.name``,
  ``.score.value``, ``.score.label``, ``.explanation``).
- **OpenInference** (spec/annotations.md): flattened span attributes ``evaluations.N.evaluation.<field>``, or in its
  annotation terms ``annotations.N.annotation.<field>``, each optionally scoped ``trace.`` or ``session.``
  (fields ``name``, ``score``, ``label``, ``explanation``; an object needs ``name`` and one result field). Consumers
  are to treat both terms, and the GenAI event, alike; so this module does.

Feedback sent after the run (post hoc) comes on a *carrier* span: in the run's trace (GenAI practice), or, as
OpenInference requires, in a trace of its own with exactly one span link to the run (:func:`feedback_target`).
``"__REDACTED__"`` (OpenInference's placeholder for masked content) reads as no text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from combee_core.otlp.wire import AttributeValue, OtlpSpan

EVALUATION_EVENT = "gen_ai.evaluation.result"
OI_KIND = "openinference.span.kind"
OI_EVALUATOR = "EVALUATOR"
REDACTED = "__REDACTED__"
"""OpenInference's placeholder for content hidden at the source (``OPENINFERENCE_HIDE_*``): no content."""

_OI_FEEDBACK = re.compile(r"^(?:(trace|session)\.)?(?:(evaluations)\.(\d+)\.evaluation|(annotations)\.(\d+)"
                          r"\.annotation)\.(name|score|label|explanation)$")
_OI_PREFIXES = ("evaluations.", "annotations.", "trace.evaluations.", "trace.annotations.", "session.evaluations.",
                "session.annotations.")


@dataclass(frozen=True)
class Evaluation:
    """One result: a ``gen_ai.evaluation.result`` event, or one OpenInference evaluation/annotation object."""

    name: str
    score: float | None
    label: str
    explanation: str


def text(value: AttributeValue) -> str:
    """An attribute as text (``""`` for none, and for OpenInference's masked ``"__REDACTED__"``)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return "" if value == REDACTED else value
    return json.dumps(value, sort_keys=True, default=str)


def _score(value: AttributeValue) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _openinference(span: OtlpSpan) -> list[Evaluation]:
    objects: dict[tuple[str, str, int], dict[str, AttributeValue]] = {}
    for key, value in span.attributes.items():
        if not key.startswith(_OI_PREFIXES):
            continue
        match = _OI_FEEDBACK.match(key)
        if match:
            scope, evaluations, e_index, _, a_index, name = match.groups()
            index = int(e_index if evaluations else a_index)
            objects.setdefault((scope or "", "e" if evaluations else "a", index), {})[name] = value
    found = []
    for _, fields in sorted(objects.items()):
        name, score = text(fields.get("name")), _score(fields.get("score"))
        label, explanation = text(fields.get("label")), text(fields.get("explanation"))
        if name and (score is not None or label or explanation):  # the spec's rule for a complete object
            found.append(Evaluation(name, score, label, explanation))
    return found


def _event(attributes: dict[str, AttributeValue]) -> Evaluation:
    return Evaluation(text(attributes.get("gen_ai.evaluation.name")) or "evaluation",
                      _score(attributes.get("gen_ai.evaluation.score.value")),
                      text(attributes.get("gen_ai.evaluation.score.label")),
                      text(attributes.get("gen_ai.evaluation.explanation")))


def evaluations(spans: Iterable[OtlpSpan]) -> list[Evaluation]:
    """Every result the spans carry, in time order (an event at its time, attributes at their span's end); a result
    carried twice (both forms on one span, as the spec allows when the fields match) counts once."""
    timed = [(event.time_ns, _event(event.attributes)) for span in spans for event in span.events
             if event.name == EVALUATION_EVENT]
    timed += [(span.end_ns, found) for span in spans for found in _openinference(span)]
    seen: set[Evaluation] = set()
    ordered = []
    for _, found in sorted(timed, key=lambda pair: pair[0]):
        if found not in seen:
            seen.add(found)
            ordered.append(found)
    return ordered


def is_feedback_key(key: str) -> bool:
    """An OpenInference evaluation or annotation attribute (any scope)."""
    return key.startswith(_OI_PREFIXES) and _OI_FEEDBACK.match(key) is not None


def carries_evaluation(span: OtlpSpan) -> bool:
    """The span carries a result in either form."""
    return any(event.name == EVALUATION_EVENT for event in span.events) or any(map(is_feedback_key, span.attributes))


def feedback_target(span: OtlpSpan) -> str:
    """The trace id of the run the span belongs to: its own, except for a post-hoc carrier (a span carrying an
    evaluation with exactly one link, to another trace: OpenInference's rule), whose link names the run."""
    if len(span.linked_trace_ids) == 1 and _valid(linked := span.linked_trace_ids[0]) and linked != span.trace_id \
            and carries_evaluation(span):
        return linked
    return span.trace_id


def _valid(trace_id: str) -> bool:
    return len(trace_id) == 32 and trace_id != "0" * 32


def is_carrier(span: OtlpSpan) -> bool:
    """A span that only carries feedback about the run (an OpenInference ``EVALUATOR`` span, or a linked carrier):
    its own input and output are the evaluator's, not the run's."""
    return str(span.attributes.get(OI_KIND) or "").upper() == OI_EVALUATOR or feedback_target(span) != span.trace_id
