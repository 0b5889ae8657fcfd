"""Every HTTP door checks who and where, on the real servers (aiohttp's client; the broker replaced: ``combee serve``
with its served table filled in, ``combee ui`` with its topic reads stubbed, the OTLP receiver with a recording
sink): a foreign Host is 421 and a foreign Origin 403 with or without a token, a key for playbook A neither reads B
nor learns that B exists, an ingest key for A cannot write into B, and the security headers are on every answer."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from combee_core.otlp.wire import decode_spans, encode_request
from combee_core.serve.access_keys import digest, new_secret
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from streams.broker.profile import BrokerProfile
from streams.ingest.otlp_receiver import OtlpReceiver, ReceiverBindError
from streams.review import server as review_server
from streams.review.server import ReviewServer
from streams.serving.http import ServeHttp
from streams.serving.served import ServedPlaybooks
from streams.testing.otel_agent import export_request, run_agent, tracer_provider
from streams.testing.playbooks import make_version

A, B, OPS = new_secret(), new_secret(), new_secret()
KEYS = (f"tenant-a {digest(A)} read=tenant-a write=tenant-a\ntenant-b {digest(B)} read=tenant-b write=tenant-b\n"
        f"ops {digest(OPS)} read=* write=*")
FOREIGN_HOST = {"Host": "rebound.evil.example:8765"}
FOREIGN_ORIGIN = {"Origin": "http://evil.example"}


def _settings(**values: object) -> CombeeSettings:
    return CombeeSettings.load(env={}, **{"serve_port": 0, "ui_port": 0, "otlp_receiver_port": 0, **values})


def _bearer(secret: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", **headers}


@contextlib.asynccontextmanager
async def serving(**values: object) -> AsyncIterator[str]:
    settings = _settings(**values)
    served = ServedPlaybooks(settings, "127.0.0.1:9", BrokerProfile.for_tansu())
    for playbook_id in ("tenant-a", "tenant-b", "shared"):
        version = make_version(1, playbook_id)
        served.table.record(version)
        served.table.update(playbook_id, version)
    async with ServeHttp(settings, served) as http:
        yield http.url


async def test_serve_refuses_a_foreign_host_and_origin_with_or_without_a_token():
    async with serving(serve_token="s3cret") as url, aiohttp.ClientSession() as client:
        for headers in (FOREIGN_HOST, _bearer("s3cret", **FOREIGN_HOST)):
            async with client.get(f"{url}/playbooks", headers=headers) as response:
                assert response.status == 421
                assert "rebound.evil.example" in (await response.json())["error"]
        async with client.get(f"{url}/playbooks/tenant-a", headers=_bearer("s3cret", **FOREIGN_ORIGIN)) as response:
            assert response.status == 403 and "evil.example" in (await response.json())["error"]
        async with client.get(f"{url}/playbooks/tenant-a", headers=_bearer("s3cret")) as response:
            assert response.status == 200  # the global token still reads every playbook
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]


async def test_a_key_for_one_tenant_reads_it_and_never_another_nor_learns_its_name():
    async with serving(access_keys=KEYS) as url, aiohttp.ClientSession() as client:
        a = _bearer(A)
        async with client.get(f"{url}/playbooks", headers=a) as response:
            assert [p["playbook_id"] for p in await response.json()] == ["tenant-a"]
        async with client.get(f"{url}/playbooks/tenant-a/context?task=retry", headers=a) as response:
            assert response.status == 200
        for path in ("/playbooks/tenant-b", "/playbooks/tenant-b/context?task=x", "/playbooks/tenant-b/versions/1",
                     "/playbooks/tenant-b/events", "/playbooks/nobody"):
            async with client.get(f"{url}{path}", headers=a) as response:
                text = await response.text()
                assert response.status == 403, path
                assert "tenant-a may not read playbook" in text, path
        async with client.get(f"{url}/playbooks/tenant-a/versions/9", headers=a) as response:
            assert response.status == 404
        async with client.get(f"{url}/playbooks", headers=_bearer(OPS)) as response:
            assert {p["playbook_id"] for p in await response.json()} == {"tenant-a", "tenant-b", "shared"}
        async with client.get(f"{url}/playbooks/nobody", headers=_bearer(OPS)) as response:
            assert response.status == 404 and "tenant-b" in await response.text()  # all-scopes key: all names
        async with client.get(f"{url}/playbooks", headers=_bearer("wrong")) as response:
            assert response.status == 401


async def test_an_unknown_playbook_names_only_the_readable_ones():
    keys = f"{KEYS}\nnew-tenant {digest('n' * 40)} read=tenant-a,tenant-c"
    async with serving(access_keys=keys) as url, aiohttp.ClientSession() as client:
        async with client.get(f"{url}/playbooks/tenant-c", headers=_bearer("n" * 40)) as response:
            text = await response.text()
        assert response.status == 404 and "tenant-a" in text and "tenant-b" not in text and "shared" not in text


@contextlib.asynccontextmanager
async def review_page(monkeypatch, token: str | None = None) -> AsyncIterator[tuple[ReviewServer, list]]:
    written: list = []

    async def playbook_ids(*args):
        return ["tenant-a", "tenant-b"]

    async def write_decision(settings, bootstrap, profile, decision):
        written.append(decision)

    monkeypatch.setattr(review_server, "playbook_ids", playbook_ids)
    monkeypatch.setattr(review_server, "write_decision", write_decision)
    async with ReviewServer(_settings(), "127.0.0.1:9", BrokerProfile.for_tansu(), "reviewer", port=0,
                            token=token) as server:
        yield server, written


async def test_the_review_page_refuses_a_foreign_host_and_a_foreign_post_and_carries_its_headers(monkeypatch):
    async with review_page(monkeypatch, token="tok") as (server, written), aiohttp.ClientSession() as client:
        async with client.get(server.url, headers=_bearer("tok")) as page:
            assert page.status == 200 and "tenant-b" in await page.text()
            csp = page.headers["Content-Security-Policy"]
            assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
            assert "script-src 'self';" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
            assert page.headers["X-Content-Type-Options"] == "nosniff"
            assert page.headers["Referrer-Policy"] == "same-origin" and page.headers["X-Frame-Options"] == "DENY"
        async with client.get(server.url, headers=_bearer("tok", **FOREIGN_HOST)) as response:
            assert response.status == 421
            assert response.headers["X-Content-Type-Options"] == "nosniff"  # refusals carry the headers too
        form = {"csrf": server.csrf, "one": "approve:tenant-a-0", "version": "1"}
        async with client.post(f"{server.url}p/tenant-a/decide", data=form, allow_redirects=False,
                               headers=_bearer("tok", **FOREIGN_ORIGIN)) as response:
            assert response.status == 403 and "evil.example" in await response.text()
    assert written == []


async def test_the_review_page_without_a_token_refuses_a_rebound_host(monkeypatch):
    async with review_page(monkeypatch) as (server, _), aiohttp.ClientSession() as client:
        async with client.get(server.url, headers=FOREIGN_HOST) as response:
            assert response.status == 421
        async with client.get(server.url) as response:
            assert response.status == 200


def _otlp_body(playbook_id: str) -> bytes:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = tracer_provider(exporter)
    for run in train_traces(build_suite(seed=7), 1, playbook_ids=(playbook_id,), run_seed=5, agents=1):
        run_agent(provider, run)
    return encode_request(export_request(exporter.get_finished_spans()), "otlp_proto")


async def test_an_ingest_key_for_a_cannot_write_into_b_and_a_key_is_required():
    written: list[tuple[str, bytes]] = []

    async def sink(records):
        written.extend(records)

    proto = {"Content-Type": "application/x-protobuf"}
    async with OtlpReceiver(_settings(access_keys=KEYS), sink) as receiver, aiohttp.ClientSession() as client:
        async with client.post(receiver.url, data=_otlp_body("tenant-a"), headers=proto) as response:
            assert response.status == 401
        async with client.post(receiver.url, data=_otlp_body("tenant-b"), headers=_bearer(A, **proto)) as response:
            assert response.status == 403
            assert b"key tenant-a may not write traces of playbook tenant-b" in await response.read()
        assert written == []
        for headers in (_bearer(A, **proto, **FOREIGN_HOST), _bearer(A, **proto, **FOREIGN_ORIGIN)):
            async with client.post(receiver.url, data=_otlp_body("tenant-a"), headers=headers) as response:
                assert response.status in (421, 403)
        assert written == []
        async with client.post(receiver.url, data=_otlp_body("tenant-a"), headers=_bearer(A, **proto)) as response:
            assert response.status == 200
    assert written and {span.attribute("combee.playbook.id") for _, record in written
                        for span in decode_spans(record)} == {"tenant-a"}


def test_the_receiver_will_not_listen_beyond_loopback_without_a_writing_key():
    async def sink(records):
        raise AssertionError("nothing is written")

    with pytest.raises(ReceiverBindError, match="COMBEE_ACCESS_KEYS"):
        OtlpReceiver(_settings(otlp_receiver_host="0.0.0.0"), sink)
    with pytest.raises(ReceiverBindError):  # keys that only read do not protect a door that writes
        OtlpReceiver(_settings(otlp_receiver_host="0.0.0.0", access_keys=f"r {digest(A)} read=*"), sink)
    OtlpReceiver(_settings(otlp_receiver_host="0.0.0.0", access_keys=KEYS), sink)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def test_the_doors_serve_tls_with_a_certificate(tmp_path, monkeypatch):
    import ssl

    cert, key = _self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    async with serving(http_tls_cert=str(cert), http_tls_key=str(key)) as url, aiohttp.ClientSession() as client:
        assert url.startswith("https://")
        async with client.get(f"{url}/playbooks", ssl=trust) as response:
            assert response.status == 200
        async with client.get(f"{url}/playbooks/tenant-a", ssl=trust,
                              headers={"Origin": url.replace("https", "http")}) as response:
            assert response.status == 403


async def test_the_worker_health_port_refuses_a_rebound_host_and_answers_probes_by_address():
    import asyncio

    from combee_core.serve.doors import DoorPolicy
    from streams.topology.health import HealthServer, WorkerReadiness
    from streams.topology.metrics import WorkerMetrics

    async def get(port: int, path: str, **headers: str) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(f"GET {path} HTTP/1.1\r\n{lines}\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        return int(response.split()[1])

    readiness = WorkerReadiness()
    policy = DoorPolicy.for_bind("0.0.0.0", "combee-worker.svc")
    async with HealthServer(readiness.report, host="127.0.0.1", port=0, metrics=WorkerMetrics(readiness).render,
                            policy=policy) as server:
        assert await get(server.port, "/metrics", Host="rebound.evil.example") == 421
        assert await get(server.port, "/metrics", Host="127.0.0.1", Origin="http://evil.example") == 403
        for host in ("10.1.2.3:8080", "combee-worker.svc:8080", "localhost:8080"):  # kubelet, a scraper
            assert await get(server.port, "/metrics", Host=host) == 200, host
        assert await get(server.port, "/healthz", Host="10.1.2.3") == 200
