"""Which broker the tests and benchmarks use: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else testcontainers Kafka when a
Docker engine answers, else an embedded Tansu. The test resolver: the product reads only ``COMBEE_KAFKA_BOOTSTRAP``
(docs/broker.md)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.broker.profile import BrokerProfile
from streams.broker.tansu import EmbeddedBroker


def docker_engine_available(timeout_s: float = 3.0) -> bool:
    """True only if the docker SDK is importable and the engine answers ``ping()``."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(timeout_s, 1)))
        try:
            return bool(client.ping())
        finally:
            with contextlib.suppress(Exception):
                client.close()
    except Exception:
        return False


@dataclass
class ResolvedBroker:
    """A broker to talk to, how it was found, and how to release it."""

    bootstrap: str
    source: Literal["env", "docker", "tansu"]
    profile: BrokerProfile
    _stop: Callable[[], None] | None = field(default=None, repr=False)
    handle: Any = field(default=None, repr=False)
    """The EmbeddedBroker or KafkaContainer when we started one."""

    def stop(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


def _start_kafka_container() -> ResolvedBroker:
    from testcontainers.kafka import KafkaContainer

    container = KafkaContainer()
    container.start()
    try:
        bootstrap = container.get_bootstrap_server()
    except Exception:
        with contextlib.suppress(Exception):
            container.stop()
        raise
    return ResolvedBroker(bootstrap, "docker", BrokerProfile.for_kafka(), container.stop, container)


def resolve_test_bootstrap(
    env: Mapping[str, str] | None = None,
    *,
    use_docker: bool = True,
    startup_timeout_s: float = 20.0,
) -> ResolvedBroker:
    """``KAFKA_BOOTSTRAP_SERVERS`` -> that (profile from ``COMBEE_BROKER_KIND``, default kafka); else a
    Docker engine that answers ``ping()`` -> testcontainers Kafka; else an :class:`EmbeddedBroker`.

    Set ``COMBEE_TEST_DOCKER=0`` to skip the Docker probe. Call ``.stop()`` on the result when done.
    """
    env = os.environ if env is None else env
    configured = (env.get("KAFKA_BOOTSTRAP_SERVERS") or "").strip()
    if configured:
        kind = (env.get("COMBEE_BROKER_KIND") or "kafka").strip().lower()
        return ResolvedBroker(configured, "env", BrokerProfile.for_kind(kind))
    if use_docker and env.get("COMBEE_TEST_DOCKER", "1") != "0" and docker_engine_available():
        try:
            return _start_kafka_container()
        except Exception as exc:  # image pull failure, no network, ...: fall through to Tansu
            print(f"[combee] testcontainers Kafka failed ({exc!r}); using embedded Tansu", file=sys.stderr)
    broker = EmbeddedBroker(startup_timeout_s=startup_timeout_s).start()
    return ResolvedBroker(broker.bootstrap, "tansu", BrokerProfile.for_tansu(), broker.cleanup, broker)
