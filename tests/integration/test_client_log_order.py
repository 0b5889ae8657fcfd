"""The Python client on a real broker, on a ``playbook`` log written out of order: versions ahead of the next one,
fenced writers' repeats and older versions, one record per produce and several in one batch. It serves exactly the
version the reading rule takes (the same record every reader takes, not a repeat of its number), reports no hole
where the broker shows none (none said in its log either: a hole taken for one would be read past for good after
60 s, within the hang guard), and follows a live batch the same way. A record read past (a hole in the offsets)
cannot be forced on a real broker (the previous session tried with 8 writers and 8 followers); the unit tests in
tests/unit/test_client_late_records.py drive the follower over one."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

import pytest

from combee_client import CombeeClient
from combee_core.log_order import valid_versions
from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.topology.kafka_clients import start_producer
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ensure_topics

pytestmark = [pytest.mark.integration]

PB = "pb"
HANG_GUARD_S = 120.0
"""Only against a hang: the client reads a few records once the topic exists (a fetch waits at most 0.1 s)."""


def _version(n: int, text: str) -> PlaybookVersion:
    entry = PlaybookEntry(entry_id="e0", section="tools", content=text, created_version=1, updated_version=n)
    return PlaybookVersion(playbook_id=PB, version=n, parent_version=n - 1, batch_id=n - 1, entries=[entry],
                           next_entry_number=2, operations=[], lineage=[f"t{n}"],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=f"{n:064x}",
                           published_at=datetime.now(timezone.utc))


async def test_the_client_serves_the_record_the_reading_rule_takes_on_a_log_written_out_of_order(
        kafka, unique_prefix, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="combee_client.follow")
    settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix)
    topic = settings.topic(Topic.PLAYBOOK)
    await ensure_topics(settings, kafka.bootstrap, connection=kafka.profile.connection)
    one_by_one = [_version(1, "v1"), _version(3, "v3 ahead: void"), _version(2, "v2"),
                  _version(2, "a fenced writer's v2"), _version(1, "an old v1 again"), _version(3, "v3")]
    in_one_batch = [_version(6, "v6 ahead: void"), _version(4, "v4"), _version(4, "a fenced writer's v4"),
                    _version(5, "v5"), _version(6, "v6"), _version(3, "an old v3 again")]
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    client = None
    try:
        for version in one_by_one:
            await producer.send_and_wait(topic, version.to_json_bytes(), key=PB.encode())
        client = CombeeClient(PB, bootstrap=kafka.bootstrap, topic_prefix=unique_prefix, promotion=False,
                              cache_path=tmp_path / "cache.json", settings=CombeeSettings.load(env={}))
        served = await asyncio.to_thread(client.wait_for_version, 3, HANG_GUARD_S)
        assert served.published is not None and served.published.entries[0].content == "v3"
        assert client.state.holes == ()

        sent = [await producer.send(topic, version.to_json_bytes(), key=PB.encode()) for version in in_one_batch]
        await asyncio.gather(*sent)  # one produce request: records of one batch on the broker
        served = await asyncio.to_thread(client.wait_for_version, 6, HANG_GUARD_S)
        assert served.published is not None and served.published.entries[0].content == "v6"
        assert client.state.holes == ()

        records = await read_topic(kafka.bootstrap, kafka.profile, topic)
        rule = valid_versions([PlaybookVersion.from_json_bytes(record.value) for record in records])
        assert [v.entries[0].content for v in rule] == ["v1", "v2", "v3", "v4", "v5", "v6"]
        assert served.published == rule[-1]
        said = [r.getMessage() for r in caplog.records if r.name == "combee_client.follow"]
        assert not [line for line in said if "read past" in line], said  # no hole where the broker shows none
    finally:
        if client is not None:
            client.close()
        await producer.stop()
