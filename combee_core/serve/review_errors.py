"""A review decision's validation problem in one plain sentence (what the page and ``combee review`` answer), not
pydantic's field paths and error codes."""

from __future__ import annotations

from pydantic import ValidationError

FIELDS = {"reviewer": "the reviewer's name", "note": "the note", "content": "the new text", "items": "a decision",
          "section": "the section", "entry_id": "the entry id", "playbook_id": "the playbook id"}


def plain_problem(error: ValidationError) -> str:
    """The first problem of ``error`` as a sentence: "the note is longer than 2000 characters"."""
    first = error.errors()[0]
    field = next((FIELDS[part] for part in reversed(first["loc"]) if isinstance(part, str) and part in FIELDS), "")
    kind, context = first["type"], first.get("ctx", {})
    if kind == "value_error":
        reason = str(context.get("error", first["msg"]))
        return f"{field} {reason}" if field else reason
    subject = field or "a value"
    if kind == "string_too_short":
        return f"{subject} is empty"
    if kind == "string_too_long":
        return f"{subject} is longer than {context.get('max_length')} characters"
    if kind == "too_long" and field == "a decision":
        return f"a decision names at most {context.get('max_length')} entries"
    if kind == "string_pattern_mismatch":
        return f"{subject} holds characters it may not"
    return f"{subject}: {first['msg'][:1].lower()}{first['msg'][1:]}"
