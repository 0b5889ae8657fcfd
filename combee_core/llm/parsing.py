"""Turn a model's text into validated models.

Real models wrap JSON in code fences or prose, leave trailing commas, use single quotes or Python literals, and
stop mid-object when they hit a token limit. :func:`repair_json` fixes those with one deterministic, string-aware
pass (no extra dependency). Items are then validated one by one with pydantic: an invalid item is dropped and
counted, and :class:`~combee_core.llm.errors.LLMOutputError` is raised only when nothing usable remains.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from combee_core import limits
from combee_core.llm.errors import LLMOutputError
from combee_core.llm.self_reference import about_learning_system
from combee_core.models import EntryTag, Insight, Operation, first_error

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_OPERATION = TypeAdapter(Operation)
_CLOSER = {"{": "}", "[": "]"}
_BARE_WORDS = {"True": "true", "False": "false", "None": "null"}
_MAX_TRUNCATION_CANDIDATES = 64
_MAX_OBJECT_CANDIDATES = 32


@dataclass(frozen=True)
class ParsedReflection:
    """Validated reflector output."""

    insights: list[Insight]
    entry_tags: list[EntryTag]
    dropped: int = 0
    repaired: bool = False
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ParsedOperations:
    """Validated aggregator/reducer output."""

    operations: list[Operation]
    dropped: int = 0
    repaired: bool = False
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- text -> JSON


def extract_json_text(text: str) -> str:
    """The part of ``text`` that holds the JSON object: inside a code fence if there is one, from the first ``{``."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    for body in candidates + [text]:
        start = body.find("{")
        if start >= 0:
            return body[start:]
    return ""


def _scan(text: str) -> tuple[str, list[str], bool, list[tuple[int, list[str]]], int]:
    """One pass over ``text`` (which starts at a ``{``), converting to strict JSON where it can.

    Returns the converted text up to the end of the first complete top-level value, the stack of still-open
    brackets (empty when the value was complete), whether a string was left open, and the cut points (output
    position and open-bracket stack just before each top-level-or-nested comma) used to back off a truncated tail,
    and the position in ``text`` just after the value (``len(text)`` when it was not complete).
    """
    out: list[str] = []
    stack: list[str] = []
    cuts: list[tuple[int, list[str]]] = []
    quote: str | None = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if quote is not None:
            if ch == "\\" and i + 1 < n:
                nxt = text[i + 1]
                if quote == "'" and nxt == "'":
                    out.append("'")
                else:
                    out.append(ch + nxt)
                i += 2
                continue
            if ch == quote:
                out.append('"')
                quote = None
            elif ch == '"':  # a double quote inside a single-quoted string
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            else:
                out.append(ch)
            i += 1
            continue
        if ch in "\"'":
            quote = ch
            out.append('"')
        elif ch in "{[":
            stack.append(ch)
            out.append(ch)
        elif ch in "}]":
            if stack and _CLOSER[stack[-1]] == ch:
                stack.pop()
                out.append(ch)
                if not stack:
                    return "".join(out), [], False, cuts, i + 1
            # a stray closer is skipped
        elif ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":  # trailing comma
                i += 1
                continue
            cuts.append((len(out), list(stack)))
            out.append(ch)
        elif ch.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":" and word not in _BARE_WORDS:
                out.append(f'"{word}"')  # unquoted key
            else:
                out.append(_BARE_WORDS.get(word, word))
            i = j
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out), stack, quote is not None, cuts, n


def _close(stack: list[str]) -> str:
    return "".join(_CLOSER[b] for b in reversed(stack))


def repair_json(text: str) -> str:
    """Best-effort strict JSON for the first object in ``text``: fences and prose removed, trailing commas dropped,
    single quotes and Python literals converted, raw newlines in strings escaped, and a truncated tail closed (backing
    off to the last complete item when simply closing is not enough). Deterministic; may still return invalid JSON."""
    body = extract_json_text(text)
    if not body:
        return ""
    return _repair_object(body)


def _repair_object(body: str) -> str:
    """:func:`repair_json` for text that starts at the object's ``{``."""
    converted, stack, open_string, cuts, _ = _scan(body)
    if not stack and not open_string:
        return converted
    # Closing as-is keeps everything when only brackets are missing; a string cut mid-way is not kept as if whole
    # (back off to the last complete item first, so a half-written insight is dropped and counted, not learned).
    closed = converted + ('"' if open_string else "") + _close(stack)
    backed_off = [
        converted[:position] + _close(cut_stack)
        for position, cut_stack in reversed(cuts[-_MAX_TRUNCATION_CANDIDATES:])
    ]
    candidates = backed_off + [closed] if open_string else [closed] + backed_off
    for candidate in candidates:
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return candidate
    return candidates[0]


def find_object_with(text: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has one of ``keys``: a top-level object (repaired if need be), or an
    object that is directly the value of a top-level object's key (``{"answer": {...}}``).

    Small models often echo their input, or the answer's template, before answering, or wrap the answer. Objects
    deeper down (inside lists) are not considered: an echoed input holds its items there, and an item of the input
    is not an answer. At most ``_MAX_OBJECT_CANDIDATES`` top-level objects are tried.
    """
    start = text.find("{")
    for _ in range(_MAX_OBJECT_CANDIDATES):
        if start < 0:
            break
        converted, stack, open_string, _cuts, end = _scan(text[start:])
        candidate = converted if not stack and not open_string else _repair_object(text[start:])
        try:
            value = json.loads(candidate)
        except ValueError:
            value = None
        if isinstance(value, dict):
            for obj in [value, *(v for v in value.values() if isinstance(v, dict))]:
                if any(key in obj for key in keys):
                    return obj
        start = text.find("{", start + max(end, 1))
    return None


def load_json_object(
    text: str, *, role: str = "", model: str = "", keys: tuple[str, ...] = ()
) -> tuple[dict[str, Any], bool]:
    """The JSON object in a model's text, and whether repair was needed. Raises ``LLMOutputError`` if there is none.

    With ``keys``, an object that has none of them is not the answer: the first object that has one (see
    :func:`find_object_with`) is returned instead, if there is one (counted as a repair).
    """
    if not text or not text.strip():
        raise LLMOutputError(role, model, "empty response", text)
    stripped = text.strip()
    value: Any = None
    problem: str | None = None
    try:
        value = json.loads(stripped)
        repaired = False
    except ValueError:
        repaired = True
        candidate = repair_json(stripped)
        if not candidate:
            problem = "no JSON object in response"
        else:
            try:
                value = json.loads(candidate)
            except ValueError as error:
                problem = f"JSON could not be repaired: {error}"
    if keys and not (isinstance(value, dict) and any(key in value for key in keys)):
        found = find_object_with(stripped, keys)
        if found is not None:
            return found, True
    if problem is not None:
        raise LLMOutputError(role, model, problem, text)
    if not isinstance(value, dict):
        raise LLMOutputError(role, model, f"expected a JSON object, got {type(value).__name__}", text)
    return value, repaired


# ---------------------------------------------------------------------------------------------- items


def _normalise_section(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"\s+", "_", value.strip().lower())
    return value


def _list_field(obj: dict[str, Any], key: str, problems: list[str]) -> list[Any]:
    value = obj.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{key!r} is not a list")
        return []
    return value


def parse_reflection_output(text: str, *, role: str = "reflector", model: str = "") -> ParsedReflection:
    """Parse ``{"insights": [{"section", "content"}], "entry_tags": [{"entry_id", "tag"}]}``.

    Invalid items (and items over the per-reflection limits) are dropped and counted. An object with neither key,
    or whose items were all invalid, raises ``LLMOutputError``; empty lists are a valid empty reflection.
    """
    obj, repaired = load_json_object(text, role=role, model=model, keys=("insights", "entry_tags"))
    if "insights" not in obj and "entry_tags" not in obj:
        raise LLMOutputError(role, model, "object has neither 'insights' nor 'entry_tags'", text)
    problems: list[str] = []
    raw_insights = _list_field(obj, "insights", problems)
    raw_tags = _list_field(obj, "entry_tags", problems)
    insights: list[Insight] = []
    tags: list[EntryTag] = []
    dropped = 0
    for item in raw_insights:
        try:
            if isinstance(item, dict) and "section" in item:
                item = {**item, "section": _normalise_section(item["section"])}
            insights.append(Insight.model_validate(item))
        except ValidationError as error:
            dropped += 1
            problems.append(f"insight dropped ({first_error(error)})")
    for item in raw_tags:
        try:
            if isinstance(item, dict) and isinstance(item.get("tag"), str):
                item = {**item, "tag": item["tag"].strip().lower()}
            tags.append(EntryTag.model_validate(item))
        except ValidationError as error:
            dropped += 1
            problems.append(f"entry tag dropped ({first_error(error)})")
    if len(insights) > limits.MAX_INSIGHTS_PER_REFLECTION:
        extra = len(insights) - limits.MAX_INSIGHTS_PER_REFLECTION
        dropped += extra
        problems.append(f"{extra} insight(s) over the limit of {limits.MAX_INSIGHTS_PER_REFLECTION} dropped")
        insights = insights[: limits.MAX_INSIGHTS_PER_REFLECTION]
    if len(tags) > limits.MAX_TAGS_PER_REFLECTION:
        extra = len(tags) - limits.MAX_TAGS_PER_REFLECTION
        dropped += extra
        problems.append(f"{extra} tag(s) over the limit of {limits.MAX_TAGS_PER_REFLECTION} dropped")
        tags = tags[: limits.MAX_TAGS_PER_REFLECTION]
    if not insights and not tags and (raw_insights or raw_tags or problems):
        raise LLMOutputError(role, model, "no valid item: " + "; ".join(problems[:5]), text)
    kept = []
    for insight in insights:
        why = about_learning_system(insight.content)
        if why is None:
            kept.append(insight)
        else:
            dropped += 1
            problems.append(f"insight dropped (a lesson about the learning system, not the task: {why})")
    return ParsedReflection(kept, tags, dropped, repaired, problems)


def parse_operations_output(text: str, *, role: str = "aggregator", model: str = "") -> ParsedOperations:
    """Parse ``{"operations": [...]}`` into ADD/UPDATE/MERGE/DELETE/TAG operations.

    Operation names are accepted in any case and section names are lower-cased; an invalid operation is dropped
    and counted. ``{"operations": []}`` is valid (nothing to change); a missing key, or only invalid operations,
    raises ``LLMOutputError``.
    """
    obj, repaired = load_json_object(text, role=role, model=model, keys=("operations",))
    if "operations" not in obj:
        raise LLMOutputError(role, model, "object has no 'operations'", text)
    problems: list[str] = []
    raw = _list_field(obj, "operations", problems)
    if problems:
        raise LLMOutputError(role, model, problems[0], text)
    operations: list[Operation] = []
    dropped = 0
    for item in raw:
        if isinstance(item, dict):
            item = dict(item)
            if isinstance(item.get("op"), str):
                item["op"] = item["op"].strip().upper()
            if "section" in item:
                item["section"] = _normalise_section(item["section"])
            if isinstance(item.get("tag"), str):
                item["tag"] = item["tag"].strip().lower()
            for count in ("support", "count"):  # an ADD or TAG exists, so it is backed at least once
                if isinstance(item.get(count), int) and not isinstance(item[count], bool) and item[count] < 1:
                    item[count] = 1
        try:
            operations.append(_OPERATION.validate_python(item))
        except ValidationError as error:
            dropped += 1
            problems.append(f"operation dropped ({first_error(error)})")
    if len(operations) > limits.MAX_OPERATIONS_PER_UPDATE:
        extra = len(operations) - limits.MAX_OPERATIONS_PER_UPDATE
        dropped += extra
        problems.append(f"{extra} operation(s) over the limit of {limits.MAX_OPERATIONS_PER_UPDATE} dropped")
        operations = operations[: limits.MAX_OPERATIONS_PER_UPDATE]
    if not operations and raw:
        raise LLMOutputError(role, model, "no valid operation: " + "; ".join(problems[:5]), text)
    kept = []
    for op in operations:
        why = about_learning_system(getattr(op, "content", ""))
        if why is None:
            kept.append(op)
        else:
            dropped += 1
            problems.append(f"{op.op} dropped (a lesson about the learning system, not the task: {why})")
    return ParsedOperations(kept, dropped, repaired, problems)
