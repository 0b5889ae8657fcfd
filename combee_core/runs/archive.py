"""The run archive: topics of a run in one JSONL file, validated line by line before anything uses it.

Layout (one JSON object a line)::

    {"format": "combee-archive", "format_version": 1, "prefix": ..., "run_id": ..., "settings": {...}, ...}
    {"topic": "traces", "partition": 0, "offset": 0, "timestamp": 1764000000000, "key": "pb",
     "headers": [{"name": "schema_version", "value": "1"}], "encoding": "json", "value": {...}, "check": "..."}
    ...
    {"end": "combee-archive", "records": 1234}

``encoding`` says how ``value`` holds the record's bytes: ``json`` (the bytes are exactly ``orjson.dumps(value)``),
``text`` (UTF-8 that is not canonical JSON), ``base64`` or ``null`` (no value). ``check`` is the first 16 hex digits
of the sha256 of the line's other fields (sorted-key JSON): a changed character anywhere is caught. The trailer's
count catches a truncated file. :func:`parse_archive` reports every bad line with its number and raises before the
caller has used any record: an archive is used whole or not at all.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from combee_core.errors import CombeeError
from combee_core.models import PlaybookVersion, first_error
from combee_core.topology import Topic, archive_models

ARCHIVE_FORMAT: Final = "combee-archive"
FORMAT_VERSION = 1
MAX_REPORTED_PROBLEMS = 20

TOPIC_MODELS: dict[str, type[BaseModel]] = archive_models()
"""Topic name -> model for the topics whose records are validated when an archive is read
(``TopicSpec.validated_on_read`` in ``combee_core.topology``): all but ``traces``, where agents may have sent invalid
traces (they are dead letters in the run, and a replay reproduces them)."""

_TOPIC = r"^[A-Za-z0-9._-]+$"


class ArchiveError(CombeeError, ValueError):
    """An archive that cannot be used. ``line`` is the first bad line (1-based; 0 when the file as a whole cannot be
    used: missing, unreadable); ``problems`` lists up to 20."""

    def __init__(self, source: str, problems: list[tuple[int, str]]) -> None:
        self.source = source
        self.problems = problems
        self.line = problems[0][0]
        if self.line == 0:  # about the file as a whole (missing, unreadable), not one of its lines
            super().__init__(f"{source}: {problems[0][1]}")
            return
        listed = "; ".join(f"line {line}: {reason}" for line, reason in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"{source}: not a usable archive: {listed}{more}")


class ArchiveHeader(BaseModel):
    """First line: what the archive holds and the settings of the run it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["combee-archive"] = ARCHIVE_FORMAT
    format_version: int = FORMAT_VERSION
    prefix: str
    run_id: str
    settings: dict[str, Any] = Field(description="CombeeSettings of the run (no broker address).")
    topics: list[str] = Field(description="Logical topic names exported.")
    exported_at: datetime


class HeaderField(BaseModel):
    """One Kafka record header."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    value: str
    encoding: Literal["text", "base64"] = "text"


class ArchiveRecord(BaseModel):
    """One Kafka record of a logical topic, its bytes preserved exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(pattern=_TOPIC)
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    timestamp: int = Field(description="Record timestamp, milliseconds since the epoch (as the broker gave it).")
    key: str | None = None
    key_encoding: Literal["text", "base64"] = "text"
    headers: list[HeaderField] = Field(default_factory=list)
    encoding: Literal["json", "text", "base64", "null"]
    value: Any = None
    check: str = Field(pattern=r"^[0-9a-f]{16}$")

    @classmethod
    def from_kafka(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> ArchiveRecord:
        """Encode a consumed record (``topic`` is the logical name, without the run's prefix)."""
        fields: dict[str, Any] = dict(topic=topic, partition=partition, offset=offset, timestamp=timestamp)
        if key is not None:
            fields["key"], fields["key_encoding"] = _encode_text(key)
        fields["headers"] = [
            dict(zip(("value", "encoding"), _encode_text(raw or b""), strict=True), name=name) for name, raw in headers
        ]
        fields["encoding"], fields["value"] = _encode_value(value)
        unchecked = cls.model_validate({**fields, "check": "0" * 16})
        return unchecked.model_copy(update={"check": record_check(unchecked.model_dump(mode="json"))})

    def value_bytes(self) -> bytes | None:
        """The record's value, byte for byte."""
        if self.encoding == "null":
            return None
        if self.encoding == "json":
            return orjson.dumps(self.value)
        if self.encoding == "text":
            return str(self.value).encode("utf-8")
        return base64.b64decode(str(self.value))

    def key_bytes(self) -> bytes | None:
        if self.key is None:
            return None
        return self.key.encode("utf-8") if self.key_encoding == "text" else base64.b64decode(self.key)

    def header_bytes(self) -> list[tuple[str, bytes]]:
        return [(h.name, h.value.encode() if h.encoding == "text" else base64.b64decode(h.value)) for h in self.headers]

    def json_value(self) -> Any:
        """The value as JSON (None when it is not JSON)."""
        return self.value if self.encoding == "json" else None

    def to_line(self) -> bytes:
        """The archive line (every field written: the checksum covers them all)."""
        return orjson.dumps(self.model_dump(mode="json"))


def _encode_text(raw: bytes) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _encode_value(raw: bytes | None) -> tuple[str, Any]:
    if raw is None:
        return "null", None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = _NOT_JSON
    if parsed is not _NOT_JSON and orjson.dumps(parsed) == raw:
        return "json", parsed
    text, encoding = _encode_text(raw)
    return encoding, text


_NOT_JSON = object()


def record_check(fields: dict[str, Any]) -> str:
    """The line checksum: sha256 of the sorted-key JSON of every field but ``check``, first 16 hex digits."""
    payload = {k: v for k, v in fields.items() if k != "check"}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@dataclass(frozen=True)
class Archive:
    """A validated archive: its header and records (in file order)."""

    header: ArchiveHeader
    records: tuple[ArchiveRecord, ...]

    def topic(self, name: str) -> list[ArchiveRecord]:
        """Records of one logical topic, by (partition, offset)."""
        return sorted((r for r in self.records if r.topic == name), key=lambda r: (r.partition, r.offset))

    def models(self, name: str, model: type[BaseModel]) -> list[Any]:
        """A topic's values parsed as ``model`` (validated already when the archive was read)."""
        return [model.model_validate(r.value) for r in self.topic(name) if r.encoding == "json"]

    def versions(self) -> list[PlaybookVersion]:
        return self.models(Topic.PLAYBOOK, PlaybookVersion)


def archive_lines(header: ArchiveHeader, records: Iterable[ArchiveRecord]) -> Iterator[bytes]:
    """The lines of an archive (without newlines): header, records, trailer."""
    yield orjson.dumps(header.model_dump(mode="json"))
    count = 0
    for record in records:
        count += 1
        yield record.to_line()
    yield orjson.dumps({"end": ARCHIVE_FORMAT, "records": count})


def write_archive(path: str | os.PathLike[str], header: ArchiveHeader, records: Iterable[ArchiveRecord]) -> int:
    """Write an archive atomically (a temporary file renamed into place); returns the number of records."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".partial")
    count = -2
    with temporary.open("wb") as out:
        for line in archive_lines(header, records):
            out.write(line + b"\n")
            count += 1
    temporary.replace(target)
    return count


def read_archive(path: str | os.PathLike[str]) -> Archive:
    """Read and validate an archive file; raises :class:`ArchiveError` naming the bad lines."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        reason = "no such file" if isinstance(error, FileNotFoundError) else f"cannot read: {error.strerror or error}"
        raise ArchiveError(source, [(0, reason)]) from error
    return parse_archive(data.split(b"\n"), source)


def parse_archive(lines: Iterable[bytes | str], source: str = "<archive>") -> Archive:
    """Validate every line (header, records, trailer); the whole archive or an :class:`ArchiveError`."""
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    problems: list[tuple[int, str]] = []
    if not numbered:
        raise ArchiveError(source, [(1, "empty archive (no header line)")])
    header = _parse_header(*numbered[0], problems)
    if problems:
        raise ArchiveError(source, problems)
    assert header is not None
    trailer_line, trailer = _parse_trailer(*numbered[-1]) if len(numbered) > 1 else (numbered[0][0], None)
    body = numbered[1:-1] if trailer is not None else numbered[1:]
    records: list[ArchiveRecord] = []
    seen: dict[tuple[str, int, int], int] = {}
    for number, line in body:
        record, problem = _parse_record(line, header)
        if problem is None and record is not None:
            position = (record.topic, record.partition, record.offset)
            if position in seen:
                problem = f"{record.topic}/{record.partition}@{record.offset} already on line {seen[position]}"
            else:
                seen[position] = number
                records.append(record)
        if problem is not None:
            problems.append((number, problem))
            if len(problems) >= MAX_REPORTED_PROBLEMS:
                break
    if trailer is None:
        problems.append((trailer_line + 1, "missing trailer line (the archive is truncated)"))
    elif not problems and trailer.get("records") != len(records):
        problems.append((trailer_line, f"trailer says {trailer.get('records')} records, the archive holds "
                                       f"{len(records)} (lines are missing)"))
    if problems:
        raise ArchiveError(source, sorted(problems))
    return Archive(header=header, records=tuple(records))


def _load_json(line: bytes | str) -> tuple[Any, str | None]:
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError as error:
        return None, f"invalid JSON ({error})"


def _parse_header(number: int, line: bytes | str, problems: list[tuple[int, str]]) -> ArchiveHeader | None:
    data, problem = _load_json(line)
    if problem is None and not (isinstance(data, dict) and data.get("format") == ARCHIVE_FORMAT):
        problem = f"not a {ARCHIVE_FORMAT} header (the first line must say \"format\": \"{ARCHIVE_FORMAT}\")"
    if problem is None and data.get("format_version") != FORMAT_VERSION:
        problem = (f"format_version {data.get('format_version')!r} is not supported "
                   f"(this version reads {FORMAT_VERSION})")
    if problem is None:
        try:
            return ArchiveHeader.model_validate(data)
        except ValidationError as error:
            problem = f"bad header: {first_error(error)}"
    problems.append((number, problem))
    return None


def _parse_trailer(number: int, line: bytes | str) -> tuple[int, dict[str, Any] | None]:
    data, problem = _load_json(line)
    if problem is None and isinstance(data, dict) and data.get("end") == ARCHIVE_FORMAT:
        return number, data
    return number, None


def _parse_record(line: bytes | str, header: ArchiveHeader) -> tuple[ArchiveRecord | None, str | None]:
    data, problem = _load_json(line)
    if problem is not None:
        return None, problem
    if not isinstance(data, dict):
        return None, f"a record must be a JSON object, got {type(data).__name__}"
    if data.get("end") == ARCHIVE_FORMAT:
        return None, "trailer line before the end of the archive"
    try:
        record = ArchiveRecord.model_validate(data)
    except ValidationError as error:
        return None, f"not an archive record: {first_error(error)}"
    if record_check(data) != record.check:
        return None, f"checksum mismatch on {record.topic}/{record.partition}@{record.offset} (the line was changed)"
    if record.topic not in header.topics:
        return None, f"topic {record.topic!r} is not listed in the header ({', '.join(header.topics)})"
    model = TOPIC_MODELS.get(record.topic)
    if model is not None:
        if record.encoding != "json":
            return None, f"{record.topic} value is {record.encoding}, expected a {model.__name__} JSON object"
        try:
            model.model_validate(record.value)
        except ValidationError as error:
            return None, f"{record.topic} value is not a {model.__name__}: {first_error(error)}"
    return record, None
