"""Recorded LLM calls: a JSONL file store, an index by call key, and a responder that replays answers from it.

Every call attempt is a :class:`~combee_core.models.CallRecord` keyed by ``call_key(model, messages, params)``.
:class:`ReplayResponder` answers an :class:`~combee_core.llm.roles.LLMRequest` with the recorded response of the same
key and attempt (recorded failures fail again). A call that is not in the record raises :class:`LLMRecordMiss`; it
is deliberately not an ``LLMError``, so no stage turns it into a dead letter and nothing falls back to the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from combee_core.errors import CombeeError
from combee_core.llm.errors import LLMCallError
from combee_core.llm.roles import LLMReply, LLMRequest
from combee_core.models import CallRecord, first_error

PROMPT_WORDS = 12
"""How many words of the prompt an :class:`LLMRecordMiss` quotes."""


class CallStoreError(CombeeError, ValueError):
    """A line of a JSONL call store is not a call record; the message names the file and line."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


class LLMRecordMiss(CombeeError):
    """Replay was asked for a call the record does not hold. Names the call so the cause can be found."""

    def __init__(self, request: LLMRequest, recorded_calls: int) -> None:
        self.role = request.role
        self.model = request.model
        self.key = request.key
        self.attempt = request.attempt
        self.prompt_start = prompt_start(request.messages)
        self.recorded_calls = recorded_calls
        super().__init__(
            f"no recorded answer for the {self.role} call to {self.model!r} (key {self.key[:16]}, attempt "
            f"{self.attempt}; prompt starts {self.prompt_start!r}); the record holds {recorded_calls} call(s). "
            "Replay never falls back to the model: a changed seed, model, prompt or input changes the call key. "
            "Use --llm-record off to call the models instead."
        )


def prompt_start(messages: list[dict[str, Any]], words: int = PROMPT_WORDS) -> str:
    """The first words of the last user message (else of the last message)."""
    chosen = next((m for m in reversed(messages) if m.get("role") == "user"), messages[-1] if messages else {})
    text = str(chosen.get("content") or "")
    head = text.split()[:words]
    return " ".join(head) + (" ..." if len(text.split()) > words else "")


class CallIndex:
    """Recorded call attempts by (key, attempt), plus the last answered attempt of each key."""

    def __init__(self, records: Iterable[CallRecord] = ()) -> None:
        self._by_attempt: dict[tuple[str, int], CallRecord] = {}
        self._answered: dict[str, CallRecord] = {}
        for record in records:
            self.add(record)

    def add(self, record: CallRecord) -> None:
        self._by_attempt.setdefault((record.key, record.attempt), record)
        if record.error is None and record.response_text is not None:
            self._answered[record.key] = record

    def __len__(self) -> int:
        return len(self._by_attempt)

    def lookup(self, key: str, attempt: int) -> CallRecord | None:
        """The recorded attempt, else the key's successful answer (a rerun may need fewer retries), else None."""
        return self._by_attempt.get((key, attempt)) or self._answered.get(key)


class ReplayResponder:
    """An ``LLMRoles`` responder answering from a :class:`CallIndex`; misses raise :class:`LLMRecordMiss`.

    ``on_miss`` is told about every miss before it is raised (a worker uses it to stop: a miss inside a background
    task must still end the run).
    """

    def __init__(self, index: CallIndex, on_miss: Callable[[LLMRecordMiss], None] | None = None) -> None:
        self.index = index
        self.on_miss = on_miss
        self.misses: list[LLMRecordMiss] = []
        self.answered = 0

    async def __call__(self, request: LLMRequest) -> LLMReply:
        record = self.index.lookup(request.key, request.attempt)
        if record is None:
            miss = LLMRecordMiss(request, len(self.index))
            self.misses.append(miss)
            if self.on_miss is not None:
                self.on_miss(miss)
            raise miss
        self.answered += 1
        if record.response_text is None:
            raise LLMCallError(request.role, request.model, f"recorded failure: {record.error or 'no response'}")
        return LLMReply(
            text=record.response_text,
            usage=record.usage,
            latency_s=record.latency_s,
            modelled_latency_s=record.modelled_latency_s,
        )


class CallStore:
    """Call records in a local JSONL file, one record a line, appended as calls happen."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, record: CallRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as out:
            out.write(record.model_dump_json().encode() + b"\n")

    def load(self) -> list[CallRecord]:
        """Every record of the file; raises :class:`CallStoreError` naming the first bad line."""
        if not self.path.exists():
            raise CallStoreError(str(self.path), 0, "no such call store")
        return parse_call_lines(self.path.read_bytes().splitlines(), str(self.path))


def parse_call_lines(lines: Iterable[bytes | str], source: str = "<calls>") -> list[CallRecord]:
    """Parse JSONL call records (blank lines skipped)."""
    records: list[CallRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(CallRecord.model_validate(orjson.loads(line)))
        except orjson.JSONDecodeError as error:
            raise CallStoreError(source, number, f"invalid JSON: {error}") from error
        except ValidationError as error:
            raise CallStoreError(source, number, f"not a call record: {first_error(error)}") from error
    return records
