"""Topic admin (create, list) and closing any aiokafka client without hanging on a broker that is gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping

from combee_core.connection import PLAINTEXT, KafkaConnection
from streams.broker.errors import TopicCreationError


async def close_client(closing: Awaitable[object], what: str, timeout_s: float = 5.0) -> None:
    """Await an aiokafka client's ``stop()``/``close()`` without hanging on a broker that is gone (give up after
    ``timeout_s``) and without aiokafka's stray ``CancelledError`` (its consumer's stop cancels a pending fetch, then
    re-raises that task's cancellation); a cancellation of the caller itself still propagates."""
    try:
        await asyncio.wait_for(closing, timeout_s)
    except TimeoutError:
        logging.getLogger(__name__).warning("%s did not close within %.1f s; left behind", what, timeout_s)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


@contextlib.asynccontextmanager
async def _admin(bootstrap: str, connection: KafkaConnection):
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.broker.connection import client_kwargs

    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, connection), request_timeout_ms=30000)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3


async def create_topics(bootstrap: str, names_to_partitions: Mapping[str, int], replication: int = 1, *,
                        connection: KafkaConnection = PLAINTEXT,
                        configs: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Create topics, each with its ``configs`` (e.g. ``cleanup.policy``); ones that already exist are fine (their
    partition count and configs are not changed)."""
    if not names_to_partitions:
        return
    from aiokafka.admin import NewTopic
    from aiokafka.errors import for_code

    async with _admin(bootstrap, connection) as admin:
        resp = await admin.create_topics(
            [NewTopic(name, int(n), replication, topic_configs=dict((configs or {}).get(name, {})))
             for name, n in names_to_partitions.items()]
        )
    errors = []
    for entry in resp.topic_errors:
        name, code = entry[0], entry[1]
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            msg = entry[2] if len(entry) > 2 else None
            errors.append(f"{name}: {for_code(code).__name__} ({code}) {msg or ''}".strip())
    if errors:
        raise TopicCreationError("the broker refused to create " + "; ".join(errors))


async def list_topics(bootstrap: str, prefix: str = "", *, connection: KafkaConnection = PLAINTEXT) -> list[str]:
    """Sorted topic names (optionally only those starting with ``prefix``)."""
    async with _admin(bootstrap, connection) as admin:
        names = await admin.list_topics()
    return sorted(n for n in names if n.startswith(prefix))
