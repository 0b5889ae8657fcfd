"""Turn a message a stage cannot use into a DeadLetter: the stage, the reason and the original bytes."""

from __future__ import annotations

import base64

from combee_core import limits
from combee_core.models import DeadLetter, utc_now


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
    """Build a dead letter keeping the original payload (as text when it is UTF-8, else base64)."""
    raw = original or b""
    kept = raw[: limits.MAX_DEAD_LETTER_ORIGINAL_BYTES]
    text: str | None
    encoded: str | None = None
    try:
        text = kept.decode("utf-8")
    except UnicodeDecodeError:
        text = None
        encoded = base64.b64encode(kept).decode("ascii")
    return DeadLetter(
        stage=stage,
        reason=reason[:4000],
        error_type=error if isinstance(error, str) else type(error).__name__,
        original_text=text,
        original_base64=encoded,
        original_size=len(raw),
        truncated=len(raw) > len(kept),
        topic=topic,
        partition=partition,
        offset=offset,
        key=key.decode("utf-8", "replace") if key is not None else None,
        trace_id=trace_id,
        playbook_id=playbook_id,
        occurred_at=utc_now(),
    )
