"""Playbook versions written to a run's topics as the reducer writes them (the `combee serve` tests and bench)."""

from __future__ import annotations

from datetime import datetime, timezone

from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.admin import create_topics
from streams.testing.broker_under_test import ResolvedBroker
from streams.topology.kafka_clients import start_producer
from streams.topology.topics import topic_partitions

LESSONS = ("retry the flaky network call with exponential backoff", "parse dates as ISO 8601 strings",
           "cache the database query results per request", "validate the JSON schema before parsing the payload",
           "log every network timeout with the host name", "close the file handle in a finally block",
           "prefer integer cents over floats for money")


def make_version(n: int, playbook_id: str = "pb", lessons: tuple[str, ...] = LESSONS) -> PlaybookVersion:
    """Version ``n`` of ``playbook_id``: every lesson an entry (updated in this version), built on ``n - 1``."""
    entries = [PlaybookEntry(entry_id=f"{playbook_id}-{i}", section="tools", content=f"{text} (round {n})",
                             helpful=n, created_version=1, updated_version=n) for i, text in enumerate(lessons)]
    digest = PlaybookVersion.compute_hash(playbook_id, n, n - 1, n - 1, entries, [], [f"t{n}"])
    return PlaybookVersion(playbook_id=playbook_id, version=n, parent_version=n - 1, batch_id=n - 1, entries=entries,
                           next_entry_number=len(lessons) + 1, operations=[], lineage=[f"t{n}"],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=digest,
                           published_at=datetime.now(timezone.utc))


async def create_run_topics(settings: CombeeSettings, kafka: ResolvedBroker) -> None:
    await create_topics(kafka.bootstrap, topic_partitions(settings), connection=kafka.profile.connection)


async def publish_versions(settings: CombeeSettings, kafka: ResolvedBroker, *versions: PlaybookVersion) -> None:
    """Write versions to the playbook topic, keyed by playbook id, as the reducer does."""
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        for version in versions:
            await producer.send_and_wait(settings.topic(Topic.PLAYBOOK), version.to_json_bytes(),
                                         key=version.playbook_id.encode())
    finally:
        await producer.stop()
