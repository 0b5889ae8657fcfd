"""Turn a message a stage cannot use into a bounded DeadLetter: the stage, the reason and the original's head.

Whatever the input (a 5 MiB record, a megabyte of control characters, bytes that are not UTF-8), the dead letter keeps
at most ``limits.MAX_DEAD_LETTER_ORIGINAL_BYTES`` of the original plus its size and sha256, and every other text
field is capped, so it serialises to less than ``limits.MAX_DEAD_LETTER_BYTES`` and can always be produced: a bad
record never stops a stage or blocks its partition.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
from typing import Any

import orjson

from combee_core import limits
from combee_core.models import DeadLetter, utc_now

_ID_PATTERNS = {
    name: re.compile(rb'"' + name.encode() + rb'"\s*:\s*"((?:[^"\\]|\\.){1,%d})"' % (4 * limits.MAX_ID_CHARS))
    for name in ("trace_id", "playbook_id")
}
_ID_LIMITS = {"trace_id": limits.MAX_ID_CHARS, "playbook_id": limits.MAX_PLAYBOOK_ID_CHARS}


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _short_id(value: Any, most: int) -> str | None:
    """``value`` when it is a non-empty string of at most ``most`` characters, else None."""
    return value if isinstance(value, str) and 0 < len(value) <= most else None


def readable_ids(raw: bytes | None) -> dict[str, str | None]:
    """Best effort: the ``trace_id`` and ``playbook_id`` of a record that may be invalid (for its dead letter).

    A record within the trace size limit is parsed as JSON and its top-level fields read; a larger (or unparseable)
    one is searched for ``"trace_id": "..."`` in its first ``MAX_DEAD_LETTER_ORIGINAL_BYTES``, so the cost is bounded.
    An id that is not a string, or longer than its limit, is left out.
    """
    found: dict[str, str | None] = {"trace_id": None, "playbook_id": None}
    if not raw:
        return found
    if len(raw) <= limits.MAX_MESSAGE_BYTES:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            return {name: _short_id(data.get(name), _ID_LIMITS[name]) for name in found}
    head = raw[: limits.MAX_DEAD_LETTER_ORIGINAL_BYTES]
    for name, pattern in _ID_PATTERNS.items():
        match = pattern.search(head)
        if match is None:
            continue
        try:
            value = orjson.loads(b'"' + match.group(1) + b'"')
        except orjson.JSONDecodeError:
            continue
        found[name] = _short_id(value, _ID_LIMITS[name])
    return found


def _utf8_head(kept: bytes, complete: bool) -> str | None:
    """``kept`` as text when it is valid UTF-8; a character cut at the end of a truncated head is dropped."""
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(kept, final=complete)
    except UnicodeDecodeError:
        return None


def make_dead_letter(
    stage: str,
    reason: str,
    error: BaseException | str,
    original: bytes | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    key: bytes | None = None,
    trace_id: str | None = None,
    playbook_id: str | None = None,
) -> DeadLetter:
    """Build a bounded dead letter: the original's head as text when it is UTF-8 (else base64), its size and sha256."""
    raw = original or b""
    kept = raw[: limits.MAX_DEAD_LETTER_ORIGINAL_BYTES]
    truncated = len(raw) > len(kept)
    text = _utf8_head(kept, complete=not truncated)
    encoded = None if text is not None else base64.b64encode(kept).decode("ascii")
    names = limits.MAX_DEAD_LETTER_NAME_CHARS
    return DeadLetter(
        stage=_cut(stage, names),
        reason=_cut(reason, limits.MAX_DEAD_LETTER_REASON_CHARS),
        error_type=_cut(error if isinstance(error, str) else type(error).__name__, names),
        original_text=text,
        original_base64=encoded,
        original_size=len(raw),
        original_sha256=hashlib.sha256(raw).hexdigest(),
        truncated=truncated,
        topic=_cut(topic, names) if topic is not None else None,
        partition=partition,
        offset=offset,
        key=_cut(key.decode("utf-8", "replace"), limits.MAX_DEAD_LETTER_KEY_CHARS) if key is not None else None,
        trace_id=_short_id(trace_id, limits.MAX_ID_CHARS),
        playbook_id=_short_id(playbook_id, limits.MAX_PLAYBOOK_ID_CHARS),
        occurred_at=utc_now(),
    )
