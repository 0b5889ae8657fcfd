"""Readers outside the pipeline (status, tail, review, promote) skip an unreadable record with one warning line
instead of stopping on its traceback."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from aiokafka.structs import ConsumerRecord

from combee_core.models import PlaybookEntry, PlaybookVersion, ReviewDecision, VersionStats
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.topology.observe import RunStatus, fill_from_records
from streams.topology.readable import readable
from streams.topology.tail_review import ReviewSoFar

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def _record(topic: str, offset: int, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord(topic=topic, partition=0, offset=offset, timestamp=0, timestamp_type=0, key=b"pb",
                          value=value, checksum=None, serialized_key_size=2,
                          serialized_value_size=len(value or b""), headers=())


def _version(n: int) -> bytes:
    entry = PlaybookEntry(entry_id="e1", section="tools", content="retry once", created_version=1, updated_version=n)
    return PlaybookVersion(playbook_id="pb", version=n, parent_version=n - 1, batch_id=n - 1, entries=[entry],
                           next_entry_number=2, operations=[], lineage=[f"t{n}"], stats=VersionStats(batch_size=1, k=1,
                           p=1), content_hash=f"{n:064x}", published_at=NOW).to_json_bytes()


def test_status_reads_past_a_record_that_is_not_a_version(caplog) -> None:
    settings = CombeeSettings()
    topic = settings.topic(Topic.PLAYBOOK)
    read = {topic: [_record(topic, 0, _version(1)), _record(topic, 1, b"not json"),
                    _record(topic, 2, b'{"playbook_id": 3}'), _record(topic, 3, None), _record(topic, 4, _version(2))]}
    status = RunStatus()
    with caplog.at_level(logging.WARNING, logger="streams.topology.readable"):
        fill_from_records(status, settings, read)
    assert status.versions == {"pb": 2}
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"skipped 3 unreadable record(s) on {topic} (not a PlaybookVersion); the first at "
                           "partition 0 offset 1")


def test_tail_in_review_mode_prints_nothing_for_an_unreadable_decision() -> None:
    from aiokafka import TopicPartition

    review = ReviewSoFar(TopicPartition("combee.review", 0), 0)
    assert review.lines(_record("combee.review", 0, b"\xff\xfe"), None) == []


def test_readable_keeps_the_order_of_the_records_that_parse() -> None:
    records = [_record("t", i, value) for i, value in enumerate([_version(1), b"[]", _version(3)])]
    assert [v.version for v in readable(records, PlaybookVersion)] == [1, 3]
    assert readable([_record("t", 0, b"{}")], ReviewDecision) == []
