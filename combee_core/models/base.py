"""What every wire model shares: the strict base class, the field types (ids, section names, time stamps), usage, and
the JSON helpers."""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal, Self

import orjson
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from combee_core import limits

SCHEMA_VERSION: Final = 1

Identifier = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_ID_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]*$"),
]
PlaybookId = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_PLAYBOOK_ID_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
SectionName = Annotated[
    str, Field(min_length=1, max_length=limits.MAX_SECTION_CHARS, pattern=r"^[a-z0-9][a-z0-9_-]*$")
]
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Control, format (bidirectional overrides, zero-width), line and paragraph separator characters."""


def _plain_name(value: str) -> str:
    """A person's name as typed ("Jane Doe", "José", "ana@host"): no control or invisible characters, nothing
    leading or trailing."""
    if value != value.strip():
        raise ValueError("must not begin or end with a space")
    bad = next((ch for ch in value if unicodedata.category(ch) in _UNSEEN_CATEGORIES), None)
    if bad is not None:
        raise ValueError(f"may not hold control or invisible characters (found U+{ord(bad):04X})")
    return value


PersonName = Annotated[
    str,
    Field(min_length=1, max_length=limits.MAX_ID_CHARS,
          json_schema_extra={"pattern": r"^\S(.*\S)?$", "$comment": "no control, format (bidirectional, "
                             "zero-width), line or paragraph separator characters (Unicode Cc, Cf, Zl, Zp)"}),
    AfterValidator(_plain_name),
]
"""Who did something, as they would write it: free text ("Jane Doe"), bounded, without control characters."""
EntryId = Annotated[str, Field(min_length=1, max_length=limits.MAX_ID_CHARS)]
InsightText = Annotated[str, Field(min_length=1, max_length=limits.MAX_INSIGHT_CHARS)]
TagValue = Literal["helpful", "harmful", "neutral"]


def _iso_datetime_only(value: Any) -> Any:
    """Let only ISO 8601 strings (and ``datetime`` objects) through to datetime parsing: not Unix times."""
    if isinstance(value, (str, datetime)):
        return value
    raise ValueError(f"a date-time must be an ISO 8601 string, got {type(value).__name__}")


Timestamp = Annotated[datetime, Field(strict=False), BeforeValidator(_iso_datetime_only)]
"""A date-time field: strict models refuse strings for ``datetime``, but on the wire it is an ISO 8601 string."""


def first_error(error: ValidationError) -> str:
    """The first problem of a validation error, as ``field.path: message`` (``<root>`` for the value itself)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "<root>"
    return f"{where}: {first['msg']}"


def describe_error(error: BaseException) -> str:
    """``Type: message`` for a log line; a validation error is its count and first problem, never the input values
    pydantic would print (a record's field may hold a secret the redaction has not seen)."""
    if isinstance(error, ValidationError):
        return f"ValidationError: {error.error_count()} problem(s) in {error.title}, first {first_error(error)}"
    return f"{type(error).__name__}: {error}"


def _base64_length(size: int) -> int:
    """Characters of the base64 encoding of ``size`` bytes."""
    return 4 * ((size + 2) // 3)


def utc_now() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class CombeeModel(BaseModel):
    """Base for every wire model: strict about types and unknown fields, frozen, JSON via orjson. A validation
    error names the field and what was wrong, never the value (``hide_input_in_errors``): its text goes to logs and
    dead-letter reasons, and a record's value may be a secret or personal data."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, hide_input_in_errors=True)

    def to_json_bytes(self) -> bytes:
        """Serialise to compact JSON bytes (the wire format)."""
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_json_bytes(cls, data: bytes | str | None) -> Self:
        """Parse and validate wire bytes. Every bad input raises a ``ValueError``: ``pydantic.ValidationError``,
        ``orjson.JSONDecodeError``, or a plain ``ValueError`` for a record without a value (a tombstone)."""
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise ValueError(f"no JSON to read: the record's value is {type(data).__name__}")
        return cls.model_validate(orjson.loads(data))


class Usage(CombeeModel):
    """Token usage and cost of one or more LLM calls."""

    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    calls: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 12),
            calls=self.calls + other.calls,
        )


def dump_json(value: Any) -> bytes:
    """orjson dump used by the whole project (sorted keys for stable bytes)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
