"""Held-out task sets on the ``task-sets`` topic: reading them (``combee tasks list/show``) and registering a new
version (``combee tasks add``; the built-in evaluator registers the synthetic suite the same way). The rules are
``combee_core.promote.task_sets``'s."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from combee_core.models import HeldOutTask, TaskSetVersion, utc_now
from combee_core.promote.task_sets import TaskSetError, TaskSetRegistry, load_registry, next_version
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.admin import create_topics
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import start_producer
from streams.topology.topic_reader import read_topic

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5


async def read_registry(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> TaskSetRegistry:
    """Every task set version on the log that counts (an unreadable record is skipped with a warning)."""
    versions = []
    for record in await read_topic(bootstrap, profile, settings.topic(Topic.TASK_SETS)):
        try:
            versions.append(TaskSetVersion.from_json_bytes(record.value))
        except ValueError as error:
            log.warning("task-sets offset %d: unreadable task set, skipped: %s", record.offset, error)
    return load_registry(versions)


async def register_task_set(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, name: str,
                            tasks: Sequence[HeldOutTask], *, source: str, by: str) -> tuple[TaskSetVersion, bool]:
    """Write ``tasks`` as the next version of ``name`` unless they are its latest version already: (the version that
    holds them, whether it was written now). Retried when another writer took the version number first."""
    await create_topics(bootstrap, {settings.topic(Topic.TASK_SETS): 1}, connection=profile.connection)
    producer = await start_producer(bootstrap, profile)
    try:
        for _ in range(WRITE_ATTEMPTS):
            registry = await read_registry(settings, bootstrap, profile)
            record = next_version(registry, name, list(tasks), source=source, by=by, now=utc_now())
            if record is None:
                latest = registry.latest(name)
                assert latest is not None
                return latest, False
            await producer.send_and_wait(settings.topic(Topic.TASK_SETS), record.to_json_bytes(),
                                         key=name.encode())
            counted = (await read_registry(settings, bootstrap, profile)).versions[name].get(record.version)
            if counted is not None and counted.digest == record.digest:
                return counted, True
    finally:
        await producer.stop()
    raise TaskSetError(f"{name}: another writer took every version number tried ({WRITE_ATTEMPTS} attempts)")
