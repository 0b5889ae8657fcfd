"""Every consumer of the project is made by :func:`new_consumer` (the stages' group members and every
``TopicReader``): on Tansu a :class:`~streams.broker.gapless_consumer.GaplessConsumer`, which never steps over a
record Tansu is still writing (``combee_core.log_order``) and whose fetch wait backs off while it is idle (up to the
profile's ``idle_fetch_max_wait_ms``); on Apache Kafka aiokafka's own.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

from streams.broker.gapless_consumer import GaplessConsumer
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import consumer_config

__all__ = ["new_consumer"]


def new_consumer(bootstrap: str, profile: BrokerProfile, group_id: str | None, **overrides: Any) -> AIOKafkaConsumer:
    """A consumer built by ``kafka_clients.consumer_config`` (then ``overrides``): gapless on Tansu, aiokafka's own
    on Kafka."""
    if profile.kind == "tansu":
        return GaplessConsumer(**{**consumer_config(bootstrap, profile, group_id), **overrides},
                               idle_fetch_max_wait_ms=profile.idle_fetch_max_wait_ms)
    return AIOKafkaConsumer(**{**consumer_config(bootstrap, profile, group_id), **overrides})
