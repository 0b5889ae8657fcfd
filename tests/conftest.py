"""Shared fixtures: one real Kafka-compatible broker per test session (see ``resolve_test_bootstrap``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from streams.broker import ResolvedBroker, resolve_test_bootstrap


@pytest.fixture(scope="session")
def kafka() -> Iterator[ResolvedBroker]:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set; else testcontainers Kafka if a Docker engine answers; else Tansu."""
    broker = resolve_test_bootstrap()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def unique_prefix() -> str:
    """A topic prefix (and so consumer-group names) no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}."
