"""The run archive: exact round trip of record bytes, and rejection of any bad line with its number."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import orjson
import pytest
from pydantic import ValidationError

from combee_core.batch.batching import ShuffleConfig, deal_batch
from combee_core.models import Insight, Reflection
from combee_core.runs.archive import (
    ArchiveError,
    ArchiveHeader,
    ArchiveRecord,
    archive_lines,
    parse_archive,
    read_archive,
    write_archive,
)
from combee_core.runs.replay import ReplayError, TraceSelection, plan_replay, settings_mismatch

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
HEADER = ArchiveHeader(prefix="run.", run_id="default", settings={"run_seed": 0}, topics=["traces", "batches"],
                       exported_at=NOW)


def trace_record(offset: int, trace_id: str | None = None, partition: int = 0) -> ArchiveRecord:
    value = orjson.dumps({"trace_id": trace_id or f"t-{offset}", "playbook_id": "pb", "score": 0.1 * offset})
    return ArchiveRecord.from_kafka("traces", partition, offset, 1_000 + offset, b"pb", value,
                                    [("schema_version", b"1")])


def manifests(count: int, size: int):
    reflections = [Reflection(reflection_id=f"r-{i}", trace_id=f"t-{i}", playbook_id="pb", seen_version=0,
                              insights=[Insight(section="general", content="x")], model="sim")
                   for i in range(count * size)]
    return [deal_batch("pb", b, reflections[b * size:(b + 1) * size], ShuffleConfig(run_seed=4),
                       target_batch_size=size, closed_by="size", closed_at=NOW).manifest for b in range(count)]


def sample_lines() -> list[bytes]:
    records = [trace_record(i) for i in range(4)]
    records.append(ArchiveRecord.from_kafka("traces", 1, 0, 5, None, b"{not json", []))
    records.append(ArchiveRecord.from_kafka("traces", 1, 1, 6, b"\xff\xfe", b"\x00\x01\xff", [("h", b"\xff")]))
    records.append(ArchiveRecord.from_kafka("traces", 1, 2, 7, b"pb", None, []))
    records.append(ArchiveRecord.from_kafka("traces", 1, 3, 8, b"pb", b'{"a": 1}', []))  # JSON, not canonical
    records += [ArchiveRecord.from_kafka("batches", 0, i, 9, b"pb", m.to_json_bytes()) for i, m in
                enumerate(manifests(2, 2))]
    return list(archive_lines(HEADER, records))


def test_round_trip_keeps_every_byte(tmp_path):
    path = tmp_path / "run.jsonl"
    lines = sample_lines()
    write_archive(path, HEADER, parse_archive(lines).records)
    archive = read_archive(path)
    assert archive.header == HEADER
    assert len(archive.records) == 10
    odd = {r.offset: r for r in archive.topic("traces") if r.partition == 1}
    assert odd[0].encoding == "text" and odd[0].value_bytes() == b"{not json"
    assert odd[1].value_bytes() == b"\x00\x01\xff" and odd[1].key_bytes() == b"\xff\xfe"
    assert odd[1].header_bytes() == [("h", b"\xff")]
    assert odd[2].encoding == "null" and odd[2].value_bytes() is None
    assert odd[3].encoding == "text" and odd[3].value_bytes() == b'{"a": 1}'
    first = archive.topic("traces")[0]
    assert first.encoding == "json" and first.value_bytes() == trace_record(0).value_bytes()
    assert first.header_bytes() == [("schema_version", b"1")]
    assert [m.batch_id for m in archive.models("batches", type(manifests(1, 1)[0]))] == [0, 1]
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize(
    ("corrupt", "line", "reason"),
    [
        (lambda ls: ls.__setitem__(3, ls[3][:-7]), 4, "invalid JSON"),
        (lambda ls: ls.__setitem__(3, ls[3].replace(b'"t-2"', b'"t-9"')), 4, "checksum mismatch"),
        (lambda ls: ls.__setitem__(2, ls[2].replace(b'"partition":0', b'"partition":-1')), 3, "partition"),
        (lambda ls: ls.__setitem__(0, ls[0].replace(b'"format_version":1', b'"format_version":7')), 1,
         "format_version 7"),
        (lambda ls: ls.__setitem__(0, b'{"hello": 1}'), 1, "not a combee-archive header"),
        (lambda ls: ls.pop(4), 11, "trailer says 10 records"),
        (lambda ls: ls.pop(), 12, "missing trailer"),
        (lambda ls: ls.insert(3, ls[2]), 4, "already on line 3"),
    ],
)
def test_a_corrupted_line_is_rejected_with_its_number(corrupt, line, reason):
    lines = sample_lines()
    corrupt(lines)
    with pytest.raises(ArchiveError, match=reason) as caught:
        parse_archive(lines, "run.jsonl")
    assert caught.value.line == line
    assert f"line {line}:" in str(caught.value) and "not a usable archive" in str(caught.value)


def test_values_of_stage_topics_must_be_their_models():
    bad = ArchiveRecord.from_kafka("batches", 0, 5, 1, b"pb", b'{"batch_id":1}')
    lines = list(archive_lines(HEADER, [trace_record(0), bad]))
    with pytest.raises(ArchiveError, match=r"line 3: batches value is not a BatchManifest") as caught:
        parse_archive(lines)
    assert caught.value.line == 3
    unlisted = list(archive_lines(HEADER, [ArchiveRecord.from_kafka("playbook", 0, 0, 1, b"pb", b"{}")]))
    with pytest.raises(ArchiveError, match="topic 'playbook' is not listed"):
        parse_archive(unlisted)


def test_missing_file_is_an_archive_error_about_the_file_not_a_line(tmp_path):
    with pytest.raises(ArchiveError) as caught:
        read_archive(tmp_path / "nope.jsonl")
    assert str(caught.value) == f"{tmp_path / 'nope.jsonl'}: no such file"
    assert caught.value.line == 0


def test_full_plan_keeps_recorded_batches_and_a_range_renumbers_them():
    recorded = manifests(3, 4)
    traces = [trace_record(i) for i in range(12)] + [ArchiveRecord.from_kafka("traces", 0, 12, 2000, b"pb", b"bad")]
    traces.append(trace_record(13, "t-open"))  # in no batch: its batch never closed
    full = plan_replay(traces, recorded)
    assert list(full.manifests) == recorded and not full.renumbered and full.matches_recording
    assert full.unbatched == ("t-open",) and len(full.traces) == 13  # the invalid one is sent: a dead letter again
    assert full.expected_versions() == {"pb": 3}

    part = plan_replay(traces, recorded, TraceSelection(from_offset=6, to_offset=12))
    assert [m.batch_id for m in part.manifests] == [0, 1] and part.renumbered and part.cut_batches == 1
    assert [m.trace_ids for m in part.manifests] == [["t-6", "t-7"], ["t-8", "t-9", "t-10", "t-11"]]
    assert [m.n for m in part.manifests] == [2, 4]
    assert part.mismatch == "recorded batch 1 of pb is cut: 2 of its 4 traces are selected"

    leading = plan_replay(traces, recorded, TraceSelection(to_offset=8))
    assert list(leading.manifests) == recorded[:2] and leading.matches_recording and not leading.renumbered
    later = plan_replay(traces, recorded, TraceSelection(from_offset=4))
    assert later.cut_batches == 0 and later.renumbered
    assert later.mismatch == "recorded batch 1 of pb becomes batch 0: the batches before it are not selected"

    timed = plan_replay(traces, recorded, TraceSelection(since=datetime.fromtimestamp(1.004, timezone.utc)))
    assert timed.manifests[0].trace_ids == ["t-4", "t-5", "t-6", "t-7"]
    with pytest.raises(ReplayError, match="no timezone"):
        plan_replay(traces, recorded, TraceSelection(until=datetime(2026, 1, 1)))


def test_settings_mismatch_names_the_batch():
    recorded = manifests(2, 2)
    assert settings_mismatch(recorded, run_seed=4, p=2) is None
    assert "run seed 5" in settings_mismatch(recorded, run_seed=5, p=2)
    assert "p=2, not p=3" in settings_mismatch(recorded, run_seed=4, p=3)


def test_archive_is_an_immutable_whole():
    """What was read cannot be changed through the archive: not its records, not one record, not a topic's view."""
    archive = parse_archive(sample_lines())
    before = [record.to_line() for record in archive.records]
    with pytest.raises(dataclasses.FrozenInstanceError):
        archive.records = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        archive.records.append(archive.records[0])  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        archive.records[0].offset = 99
    traces = archive.topic("traces")
    traces.clear()
    assert len(archive.topic("traces")) == 8
    assert [record.to_line() for record in archive.records] == before
