"""``combee serve`` with ``COMBEE_PLAYBOOK_PARENTS`` on the real broker: a child's agents are served its composed view
(its own entries, then its parent's) over HTTP and MCP; a new version of the parent alone changes the child's ETag,
wakes a waiting long-poll and an event stream of the child, and notifies an MCP subscriber of the child; a playbook
without a parent is answered as before. The Python client of a child renders and reports the composed view too."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from combee_client import CombeeClient
from combee_client.cache import ClientCache
from combee_client.runs import USED_ENTRIES
from combee_core.models import PlaybookVersion, Trace
from combee_core.serve.scoped_serving import ComposedPlaybook
from combee_core.serve.serving import etag
from combee_core.topology import Topic
from streams.testing.playbooks import create_run_topics, make_version, publish_versions
from streams.topology.topic_reader import read_topic
from tests.integration.test_serve_http import announced
from tests.integration.topology_support import env_without_combee, run_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PARENTS = "tenant-a=shared,tenant-b=shared"
CHILD_LESSONS = ("tenant a retries the payment call twice", "tenant a writes invoices in euros")
PARENT_LESSONS = ("retry a network call that timed out", "restate the question first")
TASK = "the network call timed out: retry it"
WOKEN_WITHIN_S = 30.0


def child(n: int) -> PlaybookVersion:
    return make_version(n, "tenant-a", CHILD_LESSONS)


def parent(n: int) -> PlaybookVersion:
    return make_version(n, "shared", PARENT_LESSONS)


@contextlib.asynccontextmanager
async def combee_serve(kafka, prefix: str) -> AsyncIterator[str]:
    """``combee serve`` (HTTP on any free port) with the parents set; its URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streams.cli", "serve", "--port", "0", "--bootstrap", kafka.bootstrap, "--prefix",
        prefix, cwd=str(ROOT), env=env_without_combee(COMBEE_PLAYBOOK_PARENTS=PARENTS),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield await announced(process, r"HTTP API on (\S+)/playbooks")
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def next_event(response: aiohttp.ClientResponse) -> tuple[str, ComposedPlaybook]:
    lines: list[str] = []
    while True:
        line = (await asyncio.wait_for(response.content.readline(), WOKEN_WITHIN_S)).decode().rstrip("\n")
        if line == "" and any(x.startswith("data: ") for x in lines):
            tag = next(x for x in lines if x.startswith("id: ")).removeprefix("id: ")
            data = next(x for x in lines if x.startswith("data: ")).removeprefix("data: ")
            return tag, ComposedPlaybook.model_validate_json(data)
        lines.append(line)


async def test_a_child_is_served_its_own_then_its_parents_entries_and_a_parents_version_wakes_it(kafka,
                                                                                                  unique_prefix):
    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, parent(1), child(1), make_version(1))
    async with combee_serve(kafka, unique_prefix) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/playbooks/tenant-a") as response:
            assert response.status == 200, await response.text()
            view = ComposedPlaybook.model_validate_json(await response.read())
            tag = response.headers["ETag"]
        assert [(s.playbook_id, s.version) for s in view.scopes] == [("tenant-a", 1), ("shared", 1)]
        assert [e.scope for e in view.entries] == ["tenant-a", "tenant-a", "shared", "shared"]
        assert [e.entry.content for e in view.entries] == [*(e.content for e in child(1).entries),
                                                           *(e.content for e in parent(1).entries)]
        own, inherited = view.text.split("# inherited from playbook shared")
        assert "tenant a retries" in own and "restate the question" in inherited and view.etag == tag

        # A playbook without a parent is answered as before: its version, its version's tag.
        async with client.get("/playbooks/pb") as response:
            assert response.headers["ETag"] == etag(make_version(1))
            body = PlaybookVersion.model_validate_json(await response.read())
        assert body == make_version(1).model_copy(update={"published_at": body.published_at})

        async with client.get("/playbooks/tenant-a", headers={"If-None-Match": tag}) as response:
            assert response.status == 304

        # Only the parent gets a new version: the child's long-poll and event stream wake, with a new tag.
        async with client.get("/playbooks/tenant-a/events") as events:
            first_tag, first = await next_event(events)
            assert first_tag == tag and first == view
            poll = asyncio.create_task(client.get("/playbooks/tenant-a?wait=60", headers={"If-None-Match": tag}))
            await asyncio.sleep(0.5)
            assert not poll.done(), "the long-poll answered before any new version"
            await publish_versions(settings, kafka, parent(2))
            async with await asyncio.wait_for(poll, WOKEN_WITHIN_S) as response:
                assert response.status == 200
                woken = ComposedPlaybook.model_validate_json(await response.read())
                new_tag = response.headers["ETag"]
            assert new_tag != tag and [s.version for s in woken.scopes] == [1, 2]
            assert "(round 2)" in woken.text.split("# inherited from playbook shared")[1]
            event_tag, event = await next_event(events)
            assert event_tag == new_tag and event == woken

        async with client.get("/playbooks/tenant-a/context", params={"task": TASK, "k": "2"}) as response:
            context = await response.json()
        assert context["version"] == 1 and context["etag"] == new_tag
        assert set(context["included_entry_ids"]) == {"tenant-a/tenant-a-0", "shared/shared-0"}

        # The parent's own answer is its version, unchanged by having a child.
        async with client.get("/playbooks/shared") as response:
            assert response.headers["ETag"] == etag(parent(2))

        # The list names every playbook an agent can ask for: tenant-b has no version of its own yet.
        async with client.get("/playbooks/tenant-b") as response:
            assert response.status == 200
            b_tag = response.headers["ETag"]
        async with client.get("/playbooks") as response:
            listed = {p["playbook_id"]: p for p in await response.json()}
        assert set(listed) == {"pb", "shared", "tenant-a", "tenant-b"}
        assert (listed["tenant-b"]["parent"], listed["tenant-b"]["served_version"]) == ("shared", 0)
        assert listed["tenant-b"]["etag"] == b_tag and listed["tenant-a"]["etag"] == new_tag
        assert listed["shared"]["parent"] is None and listed["shared"]["etag"] == etag(parent(2))


async def test_an_mcp_subscriber_of_a_child_is_notified_when_only_its_parent_changes(kafka, unique_prefix):
    from mcp import Client, StdioServerParameters  # here, not at collection: ~2 CPU-s per xdist worker
    from mcp.client.subscriptions import ResourceUpdated

    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, parent(1), child(1))
    server = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=env_without_combee(COMBEE_PLAYBOOK_PARENTS=PARENTS),
        args=["-m", "streams.cli", "serve", "--mcp", "stdio", "--bootstrap", kafka.bootstrap, "--prefix",
              unique_prefix])
    uri = "playbook://tenant-a"
    async with Client(server, read_timeout_seconds=60, cache=None) as client:
        read = await client.read_resource(uri)
        assert read.contents[0].text.startswith("# playbook tenant-a: tenant-a v1 + shared v1 (4 entries)")
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            await publish_versions(settings, kafka, parent(2))
            with anyio.fail_after(WOKEN_WITHIN_S):
                assert await anext(subscription) == ResourceUpdated(uri=uri)
        text = (await client.read_resource(uri)).contents[0].text
        assert text.startswith("# playbook tenant-a: tenant-a v1 + shared v2") and "(round 2)" in text
        result = await client.call_tool("context_for_task", {"playbook_id": "tenant-a", "task": TASK, "k": 2})
        assert not result.is_error, result.content
        assert set(result.structured_content["included_entry_ids"]) == {"tenant-a/tenant-a-0", "shared/shared-0"}


async def test_the_python_client_of_a_child_renders_both_scopes_and_follows_the_parents_versions(kafka, unique_prefix,
                                                                                                  tmp_path):
    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, parent(1), child(1))
    client = await asyncio.to_thread(
        CombeeClient, "tenant-a", bootstrap=kafka.bootstrap, topic_prefix=unique_prefix, promotion=False,
        connection=kafka.profile.connection, cache_path=tmp_path / "tenant-a.json", settings=settings,
        parents={"tenant-a": "shared"})
    try:
        await asyncio.to_thread(client.wait_for_version, 1, WOKEN_WITHIN_S)
        served = client.get()
        assert served.view is not None and [(s, v.version if v else 0) for s, v in served.inherited] == [("shared", 1)]
        assert [e.scope for e in served.view.entries] == ["tenant-a", "tenant-a", "shared", "shared"]
        rendering = client.render(TASK, k=2)
        assert set(rendering.entry_ids) == {"tenant-a/tenant-a-0", "shared/shared-0"} and rendering.version == 1

        # Only the parent gets a new version: the child's client serves it in its composed view.
        await publish_versions(settings, kafka, parent(2))
        deadline = time.monotonic() + WOKEN_WITHIN_S
        while [v.version if v else 0 for _, v in client.get().inherited] != [2]:
            assert time.monotonic() < deadline, "the child's client did not follow its parent's new version"
            await asyncio.sleep(0.05)
        assert "(round 2)" in client.render(TASK, k=5).text

        trace = await asyncio.to_thread(client.report, TASK, "retried", success=True, rendering=rendering)
        records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.TRACES))
        [sent] = [Trace.from_json_bytes(r.value) for r in records]
        assert sent.trace_id == trace.trace_id and sent.playbook_id == "tenant-a"
        assert set(sent.metadata[USED_ENTRIES].split(",")) == {"tenant-a/tenant-a-0", "shared/shared-0"}
        cached = ClientCache.from_json_bytes((tmp_path / "tenant-a.json").read_bytes())
        assert [(item.playbook_id, item.served.version if item.served else 0) for item in cached.inherited] == [
            ("shared", 2)]
    finally:
        await asyncio.to_thread(client.close)
