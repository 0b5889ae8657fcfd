"""``combee broker --advertise HOST:PORT`` behind a TLS terminator (streams/testing/tls_proxy.py): Tansu hands clients
the terminator's address in metadata, so ``combee status`` through it answers at once (with the loopback address
advertised, the client followed the metadata to a plaintext port with TLS and gave up after 94 s with "Unable to
get cluster metadata"). A malformed address is refused in one line."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.broker.child_process import find_free_port
from streams.testing.certificates import make_certificates, openssl_available
from streams.testing.tls_proxy import TlsProxy, server_context
from tests.integration.topology_support import env_without_combee

pytestmark = [pytest.mark.integration]

COMBEE = [sys.executable, "-m", "streams.cli"]
STATUS_DEADLINE_S = 30.0
"""`combee status` through the terminator took 3.2 s here at load 7; without --advertise it ran 94 s and failed."""


async def _run(*args: str, env: dict[str, str], timeout: float = 90) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*COMBEE, *args, env=env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.skipif(not openssl_available(), reason="needs the openssl command to make test certificates")
@pytest.mark.parametrize("mode", [["--memory"], []], ids=["memory", "durable"])
async def test_a_broker_advertising_its_tls_terminator_answers_status_through_it_promptly(tmp_path: Path,
                                                                                         mode: list[str]):
    certs = make_certificates(tmp_path / "certs", "unused-key-pass")
    upstream = find_free_port()
    env = env_without_combee(COMBEE_STATE_DIR=str(tmp_path / "state"))
    with TlsProxy(server_context(certs.server_cert, certs.server_key), ("127.0.0.1", upstream)) as proxy:
        advertised = f"localhost:{proxy.port}"  # the broker's certificate names localhost
        broker = subprocess.Popen([*COMBEE, "broker", *mode, "--port", str(upstream), "--advertise", advertised],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            bootstrap = (await asyncio.wait_for(asyncio.to_thread(broker.stdout.readline), 90)).strip()
            assert bootstrap == f"127.0.0.1:{upstream}", broker.stderr.read() if broker.poll() is not None else ""
            tls = env_without_combee(COMBEE_STATE_DIR=str(tmp_path / "state"), COMBEE_KAFKA_SECURITY_PROTOCOL="SSL",
                                     COMBEE_KAFKA_SSL_CAFILE=str(certs.ca))
            started = time.monotonic()
            code, out, err = await _run("status", "--bootstrap", advertised, env=tls)
            took = time.monotonic() - started
            assert code == 0, err
            assert took < STATUS_DEADLINE_S, (took, err)
            assert "Unable to get cluster metadata" not in out + err
            assert proxy.connections >= 2  # the first contact and the client sent back by the metadata
        finally:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait(5)
    stderr = broker.stderr.read()
    assert f"It advertises {advertised}" in stderr, stderr


@pytest.mark.parametrize("bad", ["localhost", "localhost:0", "tcp://localhost:9093", ":9093", "host:port"])
async def test_an_advertised_address_that_is_not_host_port_is_one_line_and_exit_2(tmp_path: Path, bad: str):
    code, out, err = await _run("broker", "--memory", "--advertise", bad,
                                env=env_without_combee(COMBEE_STATE_DIR=str(tmp_path / "state")), timeout=30)
    assert code == 2, err
    assert f"'{bad}' is not HOST:PORT" in err.strip().splitlines()[-1], err
