"""The client profile, the one source of the client settings that depend on the broker: what differs between Tansu
and Apache Kafka (:class:`BrokerProfile`), the sizes that do not, and which profile a broker gets. The aiokafka
producer and consumer settings are built from these (``producer_config`` / ``consumer_config``), with the connection's
security (``connection``, turned into client arguments by ``streams.broker.connection.client_kwargs``)."""

from __future__ import annotations

import contextlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from combee_core.connection import PLAINTEXT, KafkaConnection
from combee_core.partitions.fetch_wait import TANSU_IDLE_FETCH_WAIT_MS

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""The producer's largest request, on either broker: traces up to 1 MiB and dead letters of larger ones."""

FETCH_MAX_BYTES = 16 * 1024 * 1024
"""A consumer's largest fetch (per partition and in all), on either broker: larger than any request a producer may
send, so that every record fits in one fetch."""


class BrokerProfile(BaseModel):
    """The client settings that differ between Tansu and Apache Kafka (see docs/broker.md)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tansu", "kafka"]
    session_timeout_ms: int
    heartbeat_interval_ms: int
    latest_offsets_reliable: bool
    """Tansu answers ListOffsets 'latest' with the newest *batch's* base offset + 1."""
    rebalance_timeout_ms: int
    fetch_max_wait_ms: int
    """How long the broker may hold a fetch that has no data. Kafka answers a held fetch as soon as a record arrives;
    Tansu holds it for the whole wait (measured: a record produced to a caught-up consumer is read ~200 ms later at
    500 ms, ~10 ms at 20 ms), so on Tansu every hop between stages would cost up to that wait."""
    idle_fetch_max_wait_ms: int | None = None
    """On Tansu, the ceiling the fetch wait of an idle consumer backs off to (``combee_core.partitions.fetch_wait``; the
    ``tansu_idle_fetch_wait_ms`` setting): a fetch every 50 ms per consumer costs CPU in the client and the broker
    while nothing flows. None (Kafka, which answers a held fetch when a record arrives): no back-off."""
    connection: KafkaConnection = PLAINTEXT
    """How clients reach this broker (TLS, SASL); plaintext for a broker this machine runs."""

    def with_connection(self, connection: KafkaConnection) -> BrokerProfile:
        return self.model_copy(update={"connection": connection})

    def with_idle_fetch_wait(self, ceiling_ms: int) -> BrokerProfile:
        """This profile with the idle back-off up to ``ceiling_ms`` on Tansu (the same profile on Kafka)."""
        if self.kind != "tansu":
            return self
        return self.model_copy(update={"idle_fetch_max_wait_ms": ceiling_ms})

    @classmethod
    def for_tansu(cls) -> BrokerProfile:
        return cls(
            kind="tansu",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            latest_offsets_reliable=False,
            rebalance_timeout_ms=6000,
            fetch_max_wait_ms=50,
            idle_fetch_max_wait_ms=TANSU_IDLE_FETCH_WAIT_MS,
        )

    @classmethod
    def for_kafka(cls) -> BrokerProfile:
        return cls(
            kind="kafka",
            session_timeout_ms=10000,
            heartbeat_interval_ms=3000,
            latest_offsets_reliable=True,
            rebalance_timeout_ms=60000,
            fetch_max_wait_ms=500,
        )

    @classmethod
    def for_kind(cls, kind: str) -> BrokerProfile:
        return cls.for_tansu() if kind == "tansu" else cls.for_kafka()


async def profile_for(bootstrap: str, kind: Literal["auto", "kafka", "tansu"],
                      connection: KafkaConnection = PLAINTEXT) -> BrokerProfile:
    """The profile of ``kind`` (the ``broker_kind`` setting); for ``auto``, the one :func:`detect_profile` finds;
    clients reach the broker through ``connection``."""
    if kind == "auto":
        return await detect_profile(bootstrap, connection)
    return BrokerProfile.for_kind(kind).with_connection(connection)


async def detect_profile(bootstrap: str, connection: KafkaConnection = PLAINTEXT) -> BrokerProfile:
    """Tansu when the broker's cluster id starts with 'tansu'; else Kafka."""
    cluster_id = ""
    with contextlib.suppress(Exception):
        from aiokafka.admin import AIOKafkaAdminClient

        from streams.broker.connection import client_kwargs

        admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, connection))
        await admin.start()
        try:
            cluster_id = str((await admin.describe_cluster()).get("cluster_id") or "")
        finally:
            await admin.close()
    profile = BrokerProfile.for_tansu() if cluster_id.lower().startswith("tansu") else BrokerProfile.for_kafka()
    return profile.with_connection(connection)
