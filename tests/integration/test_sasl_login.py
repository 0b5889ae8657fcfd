"""A successful SASL login, then a record produced and consumed through it: Tansu (plaintext, in memory) behind a
SASL-terminating proxy (streams/testing/sasl_proxy.py: SCRAM-SHA-256/512 per RFC 5802) that Tansu advertises. Tansu's
own ``--authentication`` cannot be given a user here (docs/broker.md, "TLS and SASL"; tests/integration/test_sasl.py
checks its refusals). The clients are the project's (``client_kwargs``, ``combee status``), the SCRAM exchange
aiokafka's; a wrong password is refused in one line, without the password."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest

from combee_core.connection import KafkaConnection
from streams.broker.child_process import find_free_port
from streams.broker.tansu import EmbeddedBroker
from streams.testing.sasl_proxy import SaslProxy
from tests.integration.topology_support import env_without_combee

pytestmark = [pytest.mark.integration]

PASSWORD = "sasl-login-9d3e71"


@pytest.fixture(scope="module", params=["SCRAM-SHA-256", "SCRAM-SHA-512"])
def sasl_broker(request: pytest.FixtureRequest) -> Iterator[SaslProxy]:
    upstream = find_free_port()
    with SaslProxy(("127.0.0.1", upstream), {"alice": PASSWORD}, mechanism=request.param) as proxy:
        with EmbeddedBroker(port=upstream, advertised=proxy.address, startup_timeout_s=30):
            yield proxy


def _connection(proxy: SaslProxy, password: str = PASSWORD) -> KafkaConnection:
    return KafkaConnection(security_protocol="SASL_PLAINTEXT", sasl_mechanism=proxy.mechanism,
                           sasl_username="alice", sasl_password=password)


async def test_a_client_logs_in_with_scram_and_a_record_goes_through(sasl_broker: SaslProxy, unique_prefix: str):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from streams.broker.connection import client_kwargs

    topic = f"{unique_prefix}sasl"
    kwargs = client_kwargs(sasl_broker.address, _connection(sasl_broker))
    before = sasl_broker.logins
    producer = AIOKafkaProducer(**kwargs, request_timeout_ms=10000)
    await asyncio.wait_for(producer.start(), 30)
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, b"through SASL"), 30)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, **kwargs, auto_offset_reset="earliest", group_id=f"{unique_prefix}g")
    await asyncio.wait_for(consumer.start(), 30)
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert record.value == b"through SASL"
    assert sasl_broker.logins > before  # every connection logged in: nothing reached Tansu without it


async def test_combee_status_logs_in_and_a_wrong_password_is_one_line_without_it(sasl_broker: SaslProxy):
    def env(password: str) -> dict[str, str]:
        return env_without_combee(COMBEE_KAFKA_BOOTSTRAP=sasl_broker.address,
                                  COMBEE_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
                                  COMBEE_KAFKA_SASL_MECHANISM=sasl_broker.mechanism,
                                  COMBEE_KAFKA_SASL_USERNAME="alice", COMBEE_KAFKA_SASL_PASSWORD=password,
                                  COMBEE_BROKER_CONNECT_TIMEOUT_S="10")

    for password, code in ((PASSWORD, 0), ("wrong-" + PASSWORD, 2)):
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", "status",
                                                       env=env(password), stdout=subprocess.PIPE,
                                                       stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == code, err.decode()
        assert PASSWORD not in (out + err).decode()
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"combee status: SASL authentication ({sasl_broker.mechanism} as alice) at "), lines
    assert "SaslAuthenticationFailed" in lines[0] and "check COMBEE_KAFKA_SASL_USERNAME and the password" in lines[0]
    assert sasl_broker.refusals >= 1
