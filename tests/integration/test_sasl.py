"""SASL against a broker that authenticates: Tansu 0.6.0 with ``--authentication``. Its users live in its storage
and creating one needs an authenticated connection, so a memory-only Tansu that authenticates has no user anyone
can log in as (docs/broker.md, "TLS and SASL"): what can be checked here is that a refused login is one line naming
what to check, exit 2, for a command and a worker, without the password. A successful SASL login is checked only
in unit tests (every client gets the settings): see docs/broker.md for the limit."""

from __future__ import annotations

import asyncio
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


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_the_most_verbose_log_holds_no_password(authenticating_tansu, mechanism):
    """COMBEE_LOG_LEVEL=DEBUG with COMBEE_KAFKA_DEBUG: every aiokafka request is logged, the SASL ones included (a
    PLAIN request carries the password itself; no login needs to succeed: the request is logged as it is sent), and
    the password is in none of them (streams/broker/log_mask.py)."""
    env = env_without_combee(COMBEE_KAFKA_BOOTSTRAP=authenticating_tansu,
                             COMBEE_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", COMBEE_KAFKA_SASL_MECHANISM=mechanism,
                             COMBEE_KAFKA_SASL_USERNAME="alice", COMBEE_KAFKA_SASL_PASSWORD=PASSWORD,
                             COMBEE_BROKER_CONNECT_TIMEOUT_S="10", COMBEE_LOG_LEVEL="DEBUG", COMBEE_KAFKA_DEBUG="1")
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "streams.cli", "status", env=env,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    text = (out + err).decode()
    assert "SaslAuthenticateRequest" in text, text[-3000:]  # the request was logged...
    assert PASSWORD not in text  # ...without the password
