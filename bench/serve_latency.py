"""How soon ``combee serve`` tells an agent of a new version, and what a request costs, on a real broker.

    python -m bench.serve_latency [--versions 30] [--entries 200] [--requests 300] [--out bench/results]

One process: the embedded Tansu (or ``KAFKA_BOOTSTRAP_SERVERS``), ``ServedPlaybooks`` + the HTTP API on loopback,
an aiohttp client, and the MCP server connected in-process to the SDK's ``Client`` (``subscriptions/listen``). For
each of ``--versions`` versions (``--entries`` entries each) it measures the wall time from the producer's send
(the reducer's write, until the broker acknowledges it, included) to (a) the answer of a long-poll already waiting
with the previous ETag and (b) the MCP ``ResourceUpdated`` event. Then ``--requests`` sequential requests each of:
a 304 revalidation (``If-None-Match``), the full served version, and ``/context`` (k 12, budget 800 tokens). It does
not measure stdio or streamable-HTTP framing (the MCP client is in-process), many concurrent clients, nor a remote
broker.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import aiohttp
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated

from bench.common import machine, start_broker, write_results
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite
from combee_core.topology import Topic
from streams.serving.http import ServeHttp
from streams.serving.mcp_server import PlaybookMcp, playbook_uri
from streams.serving.served import ServedPlaybooks
from streams.testing.broker_under_test import ResolvedBroker
from streams.testing.playbooks import create_run_topics, make_version, publish_versions
from streams.topology.kafka_clients import start_producer

PB = "bench"


def summary_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1), "max_ms": round(ordered[-1] * 1000, 1)}


async def finished(work: Awaitable[None]) -> float:
    """When ``work`` finished (monotonic clock)."""
    await work
    return time.monotonic()


async def long_poll(client: aiohttp.ClientSession, tag: str, version: int) -> None:
    async with client.get(f"/playbooks/{PB}?wait=60", headers={"If-None-Match": tag}) as response:
        assert response.status == 200 and (await response.json())["version"] == version


async def next_update(updates: AsyncIterator[object]) -> None:
    assert await anext(updates) == ResourceUpdated(uri=playbook_uri(PB))


async def measure(broker: ResolvedBroker, versions: int, lessons: tuple[str, ...], requests: int) -> dict:
    settings = CombeeSettings.load(env={}, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.", serve_port=0)
    await create_run_topics(settings, broker)
    await publish_versions(settings, broker, make_version(1, PB, lessons))
    poll_s, mcp_s = [], []
    producer = await start_producer(broker.bootstrap, broker.profile)
    async with ServedPlaybooks(settings, broker.bootstrap, broker.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
        server = PlaybookMcp(served)
        notifier = asyncio.create_task(server.notify())
        async with Client(server.server, cache=None) as mcp, \
                mcp.listen(resource_subscriptions=[playbook_uri(PB)]) as updates:
            for n in range(2, versions + 2):
                async with client.get(f"/playbooks/{PB}") as response:
                    tag = response.headers["ETag"]
                waiting = asyncio.gather(finished(long_poll(client, tag, n)), finished(next_update(updates)))
                await asyncio.sleep(0.05)  # the long-poll is in the server's hands
                version = make_version(n, PB, lessons)
                written = time.monotonic()
                await producer.send_and_wait(settings.topic(Topic.PLAYBOOK), version.to_json_bytes(), key=PB.encode())
                poll_done, event_done = await waiting
                poll_s.append(poll_done - written)
                mcp_s.append(event_done - written)
        notifier.cancel()
        await producer.stop()
        timings: dict[str, list[float]] = {"revalidate_304": [], "served_version": [], "context_k12_b800": []}
        for _ in range(requests):
            for name, path, headers in (("revalidate_304", f"/playbooks/{PB}", {"If-None-Match": tag}),
                                        ("served_version", f"/playbooks/{PB}", {}),
                                        ("context_k12_b800", f"/playbooks/{PB}/context?task={lessons[7]}&k=12"
                                                             "&budget=800", {})):
                started = time.monotonic()
                async with client.get(path, headers=headers) as response:
                    await response.read()
                timings[name].append(time.monotonic() - started)
        size = len(make_version(versions + 1, PB, lessons).to_json_bytes())
    return {"publish_to_long_poll": summary_ms(poll_s), "publish_to_mcp_event": summary_ms(mcp_s),
            **{name: summary_ms(values) for name, values in timings.items()}, "version_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=30)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    suite = build_suite(seed=7)
    rules = [f.insight for f in suite.families] + [t.prompt for t in suite.train]
    lessons = tuple(dict.fromkeys(rules))[:args.entries]
    broker = start_broker()
    try:
        results = asyncio.run(measure(broker, args.versions, lessons, args.requests))
    finally:
        broker.stop()
    print(f"{args.versions} versions of {len(lessons)} entries ({results['version_bytes']:,} bytes), "
          f"{args.requests} requests each, broker {broker.source}")
    print(f"{'what':<24} {'n':>5} {'median ms':>10} {'p90 ms':>8} {'max ms':>8}")
    for name, row in results.items():
        if isinstance(row, dict):
            print(f"{name:<24} {row['n']:>5} {row['median_ms']:>10} {row['p90_ms']:>8} {row['max_ms']:>8}")
    write_results(args.out / "serve_latency.json", {"args": vars(args) | {"out": str(args.out)}, "results": results,
                                                    "machine": machine()})


if __name__ == "__main__":
    main()
