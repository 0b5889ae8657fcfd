"""A worker and the command line through mutual TLS to a real broker: Tansu behind a TLS-terminating proxy (Tansu
0.6.0 has no TLS listener of its own; docs/broker.md), certificates made at test time. It learns a version; a
wrong CA or a missing client certificate is one line and exit 2; the client key's password (a secret) appears in no
log, no command output, no /metrics answer and no exported archive."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.broker.child_process import find_free_port
from streams.broker.tansu import EmbeddedBroker
from streams.testing.certificates import CertificateSet, make_certificates, openssl_available
from streams.testing.tls_proxy import TlsProxy, server_context
from tests.integration.test_health import _get, _poll
from tests.integration.topology_support import env_without_combee, make_traces

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not openssl_available(), reason="needs the openssl command to make test certificates"),
]

COMBEE = [sys.executable, "-m", "streams.cli"]
KEY_PASSWORD = "key-pass-7c1e9d0b"  # the secret under watch: it must never be shown


@dataclass
class TlsBroker:
    bootstrap: str
    """The proxy's address, by name (the broker's certificate names ``localhost``)."""
    plaintext: str
    certs: CertificateSet
    proxy: TlsProxy

    def env(self, **extra: str) -> dict[str, str]:
        """A child's environment with the connection settings (mutual TLS, the key password) as variables."""
        connection = dict(
            COMBEE_KAFKA_BOOTSTRAP=self.bootstrap, COMBEE_KAFKA_SECURITY_PROTOCOL="SSL",
            COMBEE_KAFKA_SSL_CAFILE=str(self.certs.ca), COMBEE_KAFKA_SSL_CERTFILE=str(self.certs.client_cert),
            COMBEE_KAFKA_SSL_KEYFILE=str(self.certs.client_key), COMBEE_KAFKA_SSL_KEY_PASSWORD=KEY_PASSWORD,
            COMBEE_LOG_LEVEL="DEBUG")
        return env_without_combee(**{**connection, **extra})


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    certs = make_certificates(tmp_path_factory.mktemp("certs"), KEY_PASSWORD)
    upstream = find_free_port()
    context = server_context(certs.server_cert, certs.server_key, client_ca=certs.ca)  # mutual TLS
    with TlsProxy(context, ("127.0.0.1", upstream)) as proxy:
        broker = EmbeddedBroker(port=upstream, advertised=f"localhost:{proxy.port}", startup_timeout_s=30)
        with broker:
            yield TlsBroker(f"localhost:{proxy.port}", broker.bootstrap, certs, proxy)


async def _combee(*args: str, env: dict[str, str], timeout: float = 90) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*COMBEE, *args, env=env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow
async def test_a_worker_and_the_cli_learn_a_version_through_mutual_tls_and_never_show_the_key_password(
        tls_broker: TlsBroker, unique_prefix: str, tmp_path: Path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(t.to_json_bytes().decode() + "\n" for t in make_traces(20, seed=5)))
    settings = dict(COMBEE_TOPIC_PREFIX=unique_prefix, COMBEE_SIM_CLOCK="virtual", COMBEE_BATCH_SIZE="20",
                    COMBEE_PARTITIONS="2", COMBEE_MAX_WAIT_S="3")
    port = find_free_port()
    worker = subprocess.Popen([*COMBEE, "worker", "--health-port", str(port)], env=tls_broker.env(**settings),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    outputs: list[str] = []
    try:
        await _poll(port, "/readyz", 60, worker)
        # the commands take the connection from flags this time; the key password only ever from the environment
        flags = ("--bootstrap", tls_broker.bootstrap, "--prefix", unique_prefix,
                 "--kafka-security-protocol", "SSL", "--kafka-ssl-cafile", str(tls_broker.certs.ca),
                 "--kafka-ssl-certfile", str(tls_broker.certs.client_cert),
                 "--kafka-ssl-keyfile", str(tls_broker.certs.client_key))
        env = env_without_combee(COMBEE_KAFKA_SSL_KEY_PASSWORD=KEY_PASSWORD, COMBEE_LOG_LEVEL="DEBUG")
        code, out, err = await _combee("produce", str(traces), *flags, env=env)
        outputs += [out, err]
        assert code == 0 and "sent 20 trace(s)" in err, err
        code, out, err = await _combee("tail", "--max-versions", "1", *flags, env=env)
        outputs += [out, err]
        assert code == 0, err
        assert out.startswith("pb v1 (parent v0, batch 0)"), out
        code, out, err = await _combee("status", *flags, env=env)
        outputs += [out, err]
        assert code == 0 and "version 1" in out, out + err
        status, metrics = await _get(port, "/metrics")
        assert status == 200 and b"combee_" in metrics
        outputs.append(metrics.decode())
        archive = tmp_path / "run.jsonl"
        code, out, err = await _combee("export", "--out", str(archive), *flags, env=env)
        outputs += [out, err]
        assert code == 0, err
        outputs.append(archive.read_text())
        assert '"topic":"playbook"' in outputs[-1].replace(" ", "")  # the learned version was exported
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            _, worker_log = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, worker_log = worker.communicate()
    outputs.append(worker_log)
    assert worker.returncode == 0, worker_log[-3000:]
    assert "DEBUG" in worker_log  # the most talkative logging was on
    assert tls_broker.proxy.connections > 0
    leaks = [i for i, text in enumerate(outputs) if KEY_PASSWORD in text]
    assert not leaks, f"the key password appears in output(s) {leaks}"


@pytest.mark.parametrize("case", ["wrong CA", "no client certificate"])
async def test_a_failed_tls_handshake_is_one_line_naming_what_to_check_and_exit_2(tls_broker: TlsBroker, case):
    if case == "wrong CA":
        env = tls_broker.env(COMBEE_KAFKA_SSL_CAFILE=str(tls_broker.certs.other_ca), COMBEE_LOG_LEVEL="WARNING")
        expected = ("the broker's certificate is not accepted", "COMBEE_KAFKA_SSL_CAFILE")
    else:
        env = tls_broker.env(COMBEE_KAFKA_SSL_CERTFILE="", COMBEE_KAFKA_SSL_KEYFILE="",
                             COMBEE_KAFKA_SSL_KEY_PASSWORD="", COMBEE_LOG_LEVEL="WARNING")
        expected = ("the broker closed the connection right after it", "COMBEE_KAFKA_SSL_CERTFILE")
    for command in ("status", "worker"):
        code, out, err = await _combee(command, env=env, timeout=60)
        assert code == 2, (command, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"combee {command}: TLS handshake with "), err
        assert all(part in lines[0] for part in expected), lines[0]


async def test_the_librdkafka_example_publishes_through_mutual_tls_from_the_same_variables(tls_broker: TlsBroker,
                                                                                          unique_prefix: str):
    from combee_core.settings import CombeeSettings
    from streams.broker.admin import create_topics
    from streams.broker.profile import BrokerProfile
    from streams.topology.topic_reader import read_topic

    env = tls_broker.env()
    connection = CombeeSettings.load(env=env).kafka
    await create_topics(tls_broker.bootstrap, {f"{unique_prefix}traces": 2}, connection=connection)
    producer = Path(__file__).resolve().parents[2] / "examples" / "librdkafka" / "producer.py"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(producer), "--bootstrap", tls_broker.bootstrap, "--prefix", unique_prefix,
        "--generate", "5", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    profile = BrokerProfile.for_tansu().with_connection(connection)
    assert len(await read_topic(tls_broker.bootstrap, profile, f"{unique_prefix}traces")) == 5
    assert KEY_PASSWORD not in (out + err).decode()
