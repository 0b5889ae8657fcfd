"""``combee serve``'s HTTP API on the real broker: the served version with an ETag, 304, a long-poll woken by a new
version, a rollback served, versions kept, the context for a task within k and a budget, events, and the token."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from combee_core.models import PlaybookVersion
from combee_core.playbook import rank_for_task
from combee_core.serve.serving import as_playbook
from streams.cli.promote import operator_act
from streams.serving.http import ServeHttp
from streams.serving.served import ServedPlaybooks
from streams.testing.playbooks import create_run_topics, make_version, publish_versions
from tests.integration.test_cli import _combee
from tests.integration.topology_support import env_without_combee, run_settings

pytestmark = pytest.mark.integration

TASK = "the network call timed out: retry it"
ROOT = Path(__file__).resolve().parents[2]
STOP_WITHIN_S = 10.0
"""As a worker: SIGTERM to exit (open event streams get 2 s, streams.serving.http.SHUTDOWN_S)."""


async def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f}s for {what}"
        await asyncio.sleep(0.1)


async def test_the_served_version_its_etag_a_long_poll_a_rollback_and_the_context_for_a_task(kafka, unique_prefix):
    settings = run_settings(unique_prefix, serve_port=0)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1), make_version(2))
    async with ServedPlaybooks(settings, kafka.bootstrap, kafka.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
        async with client.get("/playbooks/pb") as response:
            assert response.status == 200, await response.text()
            body = PlaybookVersion.model_validate_json(await response.read())
            tag = response.headers["ETag"]
        assert body == make_version(2).model_copy(update={"published_at": body.published_at})

        async with client.get("/playbooks/pb", headers={"If-None-Match": tag}) as response:
            assert response.status == 304 and response.headers["ETag"] == tag

        async with client.get("/playbooks") as response:
            listed = await response.json()
        assert [(p["playbook_id"], p["served_version"], p["etag"]) for p in listed] == [("pb", 2, tag)]

        # A long-poll holds until a newer version is served, then answers it.
        started = time.monotonic()
        poll = asyncio.create_task(client.get("/playbooks/pb?wait=60", headers={"If-None-Match": tag}))
        await asyncio.sleep(0.5)
        assert not poll.done(), "the long-poll answered before any new version"
        await publish_versions(settings, kafka, make_version(3))
        async with await asyncio.wait_for(poll, 30) as response:
            assert response.status == 200
            assert PlaybookVersion.model_validate_json(await response.read()).version == 3
            v3_tag = response.headers["ETag"]
        assert v3_tag != tag and time.monotonic() - started < 30

        # A long-poll with nothing new answers 304 when its wait ends.
        async with client.get("/playbooks/pb?wait=0.5", headers={"If-None-Match": v3_tag}) as response:
            assert response.status == 304

        # An operator's rollback to v1 is the served version now (promotion off: the follower's rule).
        await operator_act(settings, kafka.bootstrap, kafka.profile, "pb", "rollback", 1, why="test")

        async def rolled_back() -> bool:
            async with client.get("/playbooks/pb") as response:
                return (await response.json())["version"] == 1
        await wait_for(rolled_back, 30, "the rollback to be served")

        async with client.get("/playbooks/pb/versions/3") as response:
            assert (await response.json())["version"] == 3
        async with client.get("/playbooks/pb/versions/9") as response:
            assert response.status == 404 and "newest seen: v3" in (await response.json())["error"]

        # The context for a task: only the top k, and within the budget.
        async with client.get("/playbooks/pb/context", params={"task": TASK, "k": "2"}) as response:
            context = await response.json()
        ranked = [e.entry_id for e in rank_for_task(as_playbook("pb", make_version(1)), TASK)]
        assert context["version"] == 1 and set(context["included_entry_ids"]) == set(ranked[:2])
        async with client.get("/playbooks/pb/context", params={"task": TASK, "k": "7", "budget": "30"}) as response:
            tight = await response.json()
        assert tight["tokens"] <= 30 and 0 < len(tight["included_entry_ids"]) < 7
        assert set(tight["included_entry_ids"]) == set(ranked[:len(tight["included_entry_ids"])])
        async with client.get("/playbooks/pb/context", params={"task": TASK, "k": "-1"}) as response:
            assert response.status == 400 and (await response.json())["error"].startswith("k:")
        async with client.get("/playbooks/nope/context", params={"task": TASK}) as response:
            assert response.status == 404 and "known: pb" in (await response.json())["error"]


async def test_events_stream_each_newly_served_version(kafka, unique_prefix):
    settings = run_settings(unique_prefix, serve_port=0)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    async with ServedPlaybooks(settings, kafka.bootstrap, kafka.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client, \
            client.get("/playbooks/pb/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")

        async def next_event() -> PlaybookVersion:
            lines: list[str] = []
            while True:
                line = (await asyncio.wait_for(response.content.readline(), 30)).decode().rstrip("\n")
                if line == "" and any(x.startswith("data: ") for x in lines):
                    data = next(x for x in lines if x.startswith("data: "))
                    return PlaybookVersion.model_validate_json(data.removeprefix("data: "))
                lines.append(line)

        assert (await next_event()).version == 1
        await publish_versions(settings, kafka, make_version(2))
        assert (await next_event()).version == 2


async def test_with_a_token_every_request_needs_it(kafka, unique_prefix):
    settings = run_settings(unique_prefix, serve_port=0, serve_token="s3cret")
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    async with ServedPlaybooks(settings, kafka.bootstrap, kafka.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with client.get("/playbooks/pb", headers=headers) as response:
                assert response.status == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
        async with client.get("/playbooks/pb", headers={"Authorization": "Bearer s3cret"}) as response:
            assert response.status == 200


async def test_serve_refuses_to_bind_beyond_loopback_without_a_token(kafka, unique_prefix):
    code, out, err = await _combee("serve", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
                                   "--host", "0.0.0.0", "--port", "0", env=env_without_combee())
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "COMBEE_SERVE_TOKEN" in err


async def test_serve_stops_on_sigterm_with_an_event_stream_open(kafka, unique_prefix):
    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streams.cli", "serve", "--port", "0", "--bootstrap", kafka.bootstrap, "--prefix",
        unique_prefix, cwd=str(ROOT), env=env_without_combee(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = await announced(process, r"HTTP API on (\S+)/playbooks")
        async with aiohttp.ClientSession(url) as client, client.get("/playbooks/pb/events") as response:
            assert (await asyncio.wait_for(response.content.readline(), 30)).startswith(b"event: version")
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert await asyncio.wait_for(process.wait(), 30) == 0
        assert time.monotonic() - started < STOP_WITHIN_S
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def announced(process: asyncio.subprocess.Process, pattern: str) -> str:
    """What ``combee serve`` says on stderr once it listens (the group of ``pattern``)."""
    assert process.stderr is not None
    seen = []
    while True:
        line = (await asyncio.wait_for(process.stderr.readline(), 120)).decode()
        assert line, f"combee serve exited: {''.join(seen)}"
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found.group(1)


async def test_with_promotion_on_the_promoted_version_is_served_not_the_newest(kafka, unique_prefix):
    settings = run_settings(unique_prefix, serve_port=0, promotion=True)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1), make_version(2))
    async with ServedPlaybooks(settings, kafka.bootstrap, kafka.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
        async with client.get("/playbooks/pb") as response:
            assert response.status == 404, "no candidate is promoted yet"
            nothing = response.headers["ETag"]
        poll = asyncio.create_task(client.get("/playbooks/pb?wait=60", headers={"If-None-Match": nothing}))
        await operator_act(settings, kafka.bootstrap, kafka.profile, "pb", "operator-promote", 1, why="test")
        async with await asyncio.wait_for(poll, 30) as response:
            assert response.status == 200 and (await response.json())["version"] == 1
        async with client.get("/playbooks") as response:
            (summary,) = await response.json()
        assert (summary["served_version"], summary["newest_version"]) == (1, 2)
