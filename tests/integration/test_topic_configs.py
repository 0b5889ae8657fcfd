"""The run's topics are created with their configs: ``checkpoints`` compacted (a view reads only the latest
checkpoint of its key), the state topics not (they are read whole)."""

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from combee_core.settings import CombeeSettings
from streams.topology.worker import ensure_topics


async def _cleanup_policy(bootstrap: str, topic: str) -> str | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    [(_, _, _, _, entries)] = response.resources
    return next((entry[1] for entry in entries if entry[0] == "cleanup.policy"), None)


async def test_checkpoints_is_created_compacted_and_the_state_topics_are_not(kafka, unique_prefix):
    settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix)
    await ensure_topics(settings, kafka.bootstrap, connection=kafka.profile.connection)
    assert await _cleanup_policy(kafka.bootstrap, f"{unique_prefix}checkpoints") == "compact"
    for state_topic in ("playbook", "batches", "metrics"):
        assert await _cleanup_policy(kafka.bootstrap, f"{unique_prefix}{state_topic}") in (None, "delete")
