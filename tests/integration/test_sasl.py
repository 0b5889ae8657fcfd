"""SASL against a broker that authenticates: Tansu 0.6.0 with ``--authentication``. Its users live in its storage
and creating one needs an authenticated connection, so a memory-only Tansu that authenticates has no user anyone
can log in as (docs/broker.md, "TLS and SASL"): what can be checked here is that a refused login is one line naming
what to check, exit 2, for a command and a worker, without the password. A successful SASL login runs through a
SASL-terminating proxy: tests/integration/test_sasl_login.py."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from streams.broker.child_process import find_free_port
from streams.broker.probe import kafka_answers
from streams.broker.tansu import tansu_binary_path
from tests.integration.topology_support import env_without_combee

pytestmark = [pytest.mark.integration]

PASSWORD = "sasl-pass-41f0c2"


@pytest.fixture(scope="module")
def authenticating_tansu() -> Iterator[str]:
    port = find_free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen([str(tansu_binary_path()), "broker", "--listener-url", url, "--advertised-listener-url",
                                url, "--storage-engine", "memory://tansu/", "--authentication"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async def up() -> None:
            for _ in range(200):
                if await kafka_answers(f"127.0.0.1:{port}", timeout_s=0.5):
                    return
                await asyncio.sleep(0.05)
            raise TimeoutError("Tansu --authentication did not answer ApiVersions within 10 s")

        asyncio.run(up())
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize(("mechanism", "expected"), [
    ("SCRAM-SHA-256", "failed (the broker refused the credentials)"),
    ("PLAIN", "the broker closed the connection during the SASL exchange"),  # Tansu offers only SCRAM
])
async def test_a_refused_sasl_login_is_one_line_naming_what_to_check_and_exit_2(authenticating_tansu, mechanism,
                                                                                expected):
    env = env_without_combee(COMBEE_KAFKA_BOOTSTRAP=authenticating_tansu,
                             COMBEE_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", COMBEE_KAFKA_SASL_MECHANISM=mechanism,
                             COMBEE_KAFKA_SASL_USERNAME="alice", COMBEE_KAFKA_SASL_PASSWORD=PASSWORD,
                             COMBEE_BROKER_CONNECT_TIMEOUT_S="10")
    for command in ("status", "worker"):
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", command, env=env,
                                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        lines = err.decode().strip().splitlines()
        assert process.returncode == 2, (command, lines)
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"combee {command}: SASL authentication ({mechanism} as alice) at "), lines[0]
        assert expected in lines[0] and "COMBEE_KAFKA_SASL_USERNAME" in lines[0], lines[0]
        assert PASSWORD not in (out + err).decode()


async def test_the_most_verbose_log_holds_no_sasl_bytes_and_no_password(authenticating_tansu, caplog):
    """Every logger at DEBUG, aiokafka's included: a client built by the project (``client_kwargs``) logs each SASL
    request it sends, with its bytes masked. No login needs to succeed: a request is logged as it is sent. Tansu
    offers SCRAM only (a PLAIN request, which carries the password itself, is never sent to it; the unit test
    tests/unit/test_kafka_log_mask.py masks one): its requests carry the user, a nonce and the client's proof (which
    allows a dictionary attack on the password), and none of them reaches the log."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    from combee_core.connection import KafkaConnection
    from streams.broker.connection import client_kwargs

    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        connection = KafkaConnection(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                     sasl_username="alice", sasl_password=PASSWORD)
        producer = AIOKafkaProducer(**client_kwargs(authenticating_tansu, connection), request_timeout_ms=5000)
        with pytest.raises((KafkaError, KeyError)):  # refused: no such user (SCRAM), mechanism not offered (PLAIN)
            await asyncio.wait_for(producer.start(), 30)
        await asyncio.wait_for(producer.stop(), 10)
    text = caplog.text
    assert "SaslAuthenticateRequest_v1(sasl_auth_bytes=<" in text, text[-3000:]  # logged, masked
    assert "SaslHandShakeRequest_v1(mechanism='PLAIN')" in text
    assert PASSWORD not in text and "sasl_auth_bytes=b'" not in text and "n=alice,r=" not in text
