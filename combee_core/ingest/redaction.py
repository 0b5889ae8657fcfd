"""Redaction at ingest (no Kafka): detectors that replace personal data and secrets with typed placeholders in every
text field of a trace, and count what they replaced (never keeping the values).

Built-in detectors, applied after the user's own patterns (so a user pattern never sees a built-in placeholder), in
this order (docs/redaction.md):

- ``SECRET``: detect-secrets' plugins (``combee_core.ingest.secret_library``), then the project's own rules for what
  they miss (``combee_core.ingest.detectors``): values after labels joined by ``_ - .`` (``DB_PASSWORD=``,
  ``"db_password": "..."``), headers, URL passwords, private key blocks, keys of known shapes;
- ``EMAIL``: ``local@domain.tld``, letters of any script;
- ``CARD``: 13 to 19 digits (any spaces, dashes, dots or slashes between groups) with a card network's prefix that
  pass the Luhn check, not inside a longer run of letters and digits (a hex id);
- ``PHONE``: ``+`` and 8 to 15 digits, or a national number written in groups (``(415) 555-0134``,
  ``020 7946 0958``).

Free text gets ``[NAME]``; an identifier (``trace_id``, ``agent_id``, ``task_id``) keeps its shape and stays unique:
a match becomes ``name-<10 hex of a keyed sha256 of the match>`` (``salt``), so resends still deduplicate.
``playbook_id`` (the routing key, chosen by the operator), numbers and timestamps are not text and are kept.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from combee_core import limits
from combee_core.errors import CombeeError
from combee_core.ingest.detectors import OWN_DETECTORS, Detector
from combee_core.ingest.secret_library import library_detectors
from combee_core.models import DeadLetter, Trace
from combee_core.models.base import first_error

BUILT_IN = ("secret", "email", "card", "phone")
IDENTIFIER_FIELDS = frozenset({"trace_id", "agent_id", "task_id"})
KEPT_FIELDS = frozenset({"playbook_id", "schema_version"})
_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")


class RedactionError(CombeeError, ValueError):
    """Redaction could not be applied (a bad pattern, or a trace over a limit once redacted)."""


class SpanFinder(Protocol):
    """What a detector is: a name (its placeholder is ``[name]``) and the spans of a text to replace."""

    @property
    def name(self) -> str: ...

    def spans(self, text: str) -> list[tuple[int, int]]: ...


DETECTORS: dict[str, tuple[SpanFinder, ...]] = {
    "secret": (*library_detectors(), OWN_DETECTORS["secret"]), "email": (OWN_DETECTORS["email"],),
    "card": (OWN_DETECTORS["card"],), "phone": (OWN_DETECTORS["phone"],)}
"""The built-in detectors by setting name, in the order they apply: ``secret`` is the maintained library's
detectors, then the project's own rules for what they miss; the others are the project's own
(``combee_core.ingest.detectors``). Secrets first: a key's digits are never taken for a phone number, half left."""
ALL_BUILT_IN: tuple[SpanFinder, ...] = tuple(d for group in DETECTORS.values() for d in group)


def parse_patterns(text: str) -> tuple[Detector, ...]:
    """User detectors from a setting: a JSON object ``{"NAME": "regex"}``, or ``NAME=regex`` lines. A name is an
    upper-case word (its placeholder is ``[NAME]``); raises :class:`RedactionError` for a bad name or regex."""
    text = text.strip()
    if not text:
        return ()
    if text.startswith("{"):
        try:
            pairs = list(orjson.loads(text).items())
        except (orjson.JSONDecodeError, AttributeError) as error:
            raise RedactionError(f"redaction patterns: not a JSON object of NAME: regex ({error})") from error
    else:
        pairs = [tuple(line.split("=", 1)) for line in text.splitlines() if line.strip()]
    detectors = []
    for pair in pairs:
        if len(pair) != 2 or not _NAME.match(str(pair[0]).strip()):
            raise RedactionError(f"redaction pattern {str(pair[0])[:40]!r}: expected NAME=regex with NAME an "
                                 "upper-case word (A-Z, 0-9, _)")
        name, regex = str(pair[0]).strip(), str(pair[1])
        try:
            detectors.append(Detector(name, re.compile(regex)))
        except re.error as error:
            raise RedactionError(f"redaction pattern {name}: invalid regex ({error})") from error
        if detectors[-1].pattern.search("") is not None:
            raise RedactionError(f"redaction pattern {name}: matches the empty string")
    return tuple(detectors)


def parse_detectors(text: str) -> tuple[SpanFinder, ...]:
    """The built-in detectors named in a comma-separated list (``email,phone,card,secret``; empty: none)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in DETECTORS]
    if unknown:
        raise RedactionError(f"unknown redaction detector(s) {', '.join(unknown)}: choose from {', '.join(BUILT_IN)}")
    return tuple(detector for key, group in DETECTORS.items() if key in names for detector in group)


@dataclass(frozen=True)
class RedactionConfig:
    """What to redact: the detectors in the order they apply (the user's first), and the key of identifiers'
    digests. ``enabled`` False: everything passes unchanged."""

    detectors: tuple[SpanFinder, ...] = ALL_BUILT_IN
    salt: bytes = b""
    enabled: bool = True

    @classmethod
    def from_settings(cls, settings: Any) -> RedactionConfig:
        """From ``CombeeSettings`` (``redact``, ``redact_detectors``, ``redact_patterns``, ``redact_salt``)."""
        return cls(detectors=parse_patterns(settings.redact_patterns) + parse_detectors(settings.redact_detectors),
                   salt=settings.redact_salt.get_secret_value().encode(), enabled=settings.redact)


@dataclass
class Redactor:
    """Applies a :class:`RedactionConfig` and counts replacements per placeholder name (``counts``)."""

    config: RedactionConfig
    counts: Counter[str] = field(default_factory=Counter)

    def _replace(self, text: str, make: Callable[[SpanFinder, str], str]) -> str:
        if not self.config.enabled:
            return text
        for detector in self.config.detectors:
            spans = detector.spans(text)
            for start, end in reversed(spans):
                text = text[:start] + make(detector, text[start:end]) + text[end:]
            self.counts[detector.name] += len(spans)
        return text

    def text(self, text: str) -> str:
        """Free text with every match replaced by its ``[NAME]`` placeholder."""
        return self._replace(text, lambda detector, _: f"[{detector.name}]")

    def identifier(self, value: str) -> str:
        """An id with every match replaced by ``name-<digest>``: still a valid, unique, stable identifier."""
        def pseudonym(detector: SpanFinder, found: str) -> str:
            digest = hmac.new(self.config.salt, found.encode(), hashlib.sha256).hexdigest()[:10]
            return f"{detector.name.lower().replace('_', '-')}-{digest}"
        return self._replace(value, pseudonym)

    def value(self, value: Any, name: str = "") -> Any:
        """Walk a dumped model: strings redacted (identifiers by name as identifiers, kept fields kept), lists and
        dicts walked, keys included (two keys that redact alike are both kept, the later one suffixed)."""
        if isinstance(value, str):
            if name in KEPT_FIELDS:
                return value
            return self.identifier(value) if name in IDENTIFIER_FIELDS else self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            walked: dict[str, Any] = {}
            for key, item in value.items():
                new_key = self.text(key) if name == "metadata" else key
                while new_key in walked:
                    new_key += "'"
                walked[new_key] = self.value(item, key if name != "metadata" else "")
            return walked
        return value

    def trace(self, trace: Trace) -> Trace:
        """The trace with every text field redacted. Raises :class:`RedactionError` when a field is over its
        limit once redacted (a placeholder longer than what it replaced)."""
        if not self.config.enabled:
            return trace
        try:
            return Trace.model_validate(self.value(trace.model_dump()))
        except ValidationError as error:
            raise RedactionError(f"trace over a limit once redacted: {first_error(error)}") from error

    def raw(self, raw: bytes | None) -> bytes | None:
        """Bytes that may hold personal data (an unreadable trace or OTLP record): redacted as text, the bytes that
        are not UTF-8 kept as they are (so the dead letter still shows the operator what was wrong)."""
        if not self.config.enabled or not raw:
            return raw
        return self.text(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def dead_letter(self, letter: DeadLetter, original: bool) -> DeadLetter:
        """A dead letter with its reason redacted, its trace id as an identifier, and (``original``: it came from
        a topic before the ingest point) its kept original redacted, or dropped when it is binary."""
        if not self.config.enabled:
            return letter
        update: dict[str, Any] = {"reason": self.text(letter.reason),
                                  "trace_id": self.identifier(letter.trace_id) if letter.trace_id else None}
        if original and letter.original_text is not None:
            kept, truncated = self.text(letter.original_text), letter.truncated
            if len(kept) > limits.MAX_DEAD_LETTER_ORIGINAL_BYTES:
                kept, truncated = kept[:limits.MAX_DEAD_LETTER_ORIGINAL_BYTES], True
            update.update(original_text=kept, truncated=truncated)
        elif original and letter.original_base64 is not None:
            kept_bytes = self.raw(base64.b64decode(letter.original_base64)) or b""
            truncated = letter.truncated or len(kept_bytes) > limits.MAX_DEAD_LETTER_ORIGINAL_BYTES
            update.update(original_base64=base64.b64encode(kept_bytes[:limits.MAX_DEAD_LETTER_ORIGINAL_BYTES]).decode(),
                          truncated=truncated)
        return letter.model_copy(update=update)


def redact_trace(trace: Trace, config: RedactionConfig | None = None) -> tuple[Trace, dict[str, int]]:
    """The trace with every text field redacted, and how many of each placeholder were put in (for a client that
    redacts before producing). ``config`` None: the built-in detectors."""
    redactor = Redactor(config or RedactionConfig())
    redacted = redactor.trace(trace)
    return redacted, {name: count for name, count in redactor.counts.items() if count}
