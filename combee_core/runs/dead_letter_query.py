"""Reading dead letters (``combee dlq``): which ones match an operator's filter, how one reads as a line, and the
original bytes it kept."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from combee_core.models import DeadLetter


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to show. Every given criterion must hold; ``reason`` is a case-insensitive substring of the
    reason, ``error_type`` and ``stage`` match exactly (case-insensitive)."""

    stage: str | None = None
    error_type: str | None = None
    reason: str | None = None
    playbook_id: str | None = None

    def matches(self, letter: DeadLetter) -> bool:
        return ((self.stage is None or letter.stage.lower() == self.stage.lower())
                and (self.error_type is None or letter.error_type.lower() == self.error_type.lower())
                and (self.reason is None or self.reason.lower() in letter.reason.lower())
                and (self.playbook_id is None or letter.playbook_id == self.playbook_id))

    def describe(self) -> str:
        given = [f"{name} {value!r}" for name, value in (("stage", self.stage), ("error type", self.error_type),
                                                          ("reason containing", self.reason),
                                                          ("playbook", self.playbook_id)) if value is not None]
        return ", ".join(given) or "all"


def original_bytes(letter: DeadLetter) -> bytes:
    """The original record's bytes as kept (its first 64 KiB when ``truncated``)."""
    if letter.original_text is not None:
        return letter.original_text.encode("utf-8")
    if letter.original_base64 is not None:
        return base64.b64decode(letter.original_base64)
    return b""


def describe_dead_letter(letter: DeadLetter, offset: int | None = None) -> str:
    """One line: where and when, the stage and reason class, the ids, the source record, then the reason."""
    where = f"#{offset} " if offset is not None else ""
    ids = " ".join(f"{name}={value}" for name, value in (("playbook", letter.playbook_id),
                                                          ("trace", letter.trace_id)) if value)
    source = (f"{letter.topic}[{letter.partition}]@{letter.offset}" if letter.topic is not None
              and letter.offset is not None else letter.topic or "no source record")
    size = f"{letter.original_size} bytes{', truncated' if letter.truncated else ''}"
    return (f"{where}{letter.occurred_at.isoformat(timespec='seconds')} {letter.stage} {letter.error_type}"
            f"{' ' + ids if ids else ''} ({source}, {size}): {' '.join(letter.reason.split())}")


def summarise(letters: Iterable[DeadLetter]) -> list[tuple[str, str, int]]:
    """(stage, error type, count) of the given dead letters, most frequent first."""
    counts = Counter((letter.stage, letter.error_type) for letter in letters)
    return [(stage, error_type, count) for (stage, error_type), count in
            sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
