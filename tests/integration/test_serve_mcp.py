"""``combee serve --mcp`` with the official MCP SDK's client, on the real broker: the client lists the playbook
resources, subscribes, is notified of a new version (2026-07-28 ``subscriptions/listen`` and the handshake era's
``resources/subscribe``, over stdio and streamable HTTP), reads it, and the tool returns the context for a task."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from combee_core.playbook import rank_for_task
from combee_core.serve.serving import as_playbook
from streams.testing.playbooks import create_run_topics, make_version, publish_versions
from tests.integration.test_serve_http import announced
from tests.integration.topology_support import env_without_combee, run_settings

if TYPE_CHECKING:  # the MCP SDK is imported by the tests that use it: ~2 CPU-s at every xdist worker's collection
    from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
URI = "playbook://pb"
TASK = "the network call timed out: retry it"
NOTIFIED_WITHIN_S = 30.0


def stdio_server(kafka, prefix: str) -> StdioServerParameters:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env_without_combee(),
                                 args=["-m", "streams.cli", "serve", "--mcp", "stdio", "--bootstrap", kafka.bootstrap,
                                       "--prefix", prefix])


async def check_tool(client: Client, version: int) -> None:
    import mcp.types as types

    result = await client.call_tool("context_for_task", {"playbook_id": "pb", "task": TASK, "k": 2})
    assert not result.is_error, result.content
    found = result.structured_content
    ranked = [e.entry_id for e in rank_for_task(as_playbook("pb", make_version(version)), TASK)]
    assert found["version"] == version and set(found["included_entry_ids"]) == set(ranked[:2])
    assert isinstance(result.content[0], types.TextContent) and "network" in result.content[0].text
    refused = await client.call_tool("context_for_task", {"playbook_id": "pb", "task": ""})
    assert refused.is_error and "task" in refused.content[0].text


async def test_an_mcp_client_lists_subscribes_is_notified_and_gets_context_over_stdio(kafka, unique_prefix):
    from mcp import Client
    from mcp.client.subscriptions import ResourceUpdated

    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    async with Client(stdio_server(kafka, unique_prefix), read_timeout_seconds=60, cache=None) as client:
        listed = await client.list_resources()
        assert [str(r.uri) for r in listed.resources] == [URI]
        read = await client.read_resource(URI)
        assert "v1" in read.contents[0].text and make_version(1).entries[0].content in read.contents[0].text

        async with client.listen(resource_subscriptions=[URI]) as subscription:
            await publish_versions(settings, kafka, make_version(2))
            with anyio.fail_after(NOTIFIED_WITHIN_S):
                assert await anext(subscription) == ResourceUpdated(uri=URI)
        read = await client.read_resource(URI)
        assert read.contents[0].text.startswith("# playbook pb v2")
        await check_tool(client, 2)


async def test_a_handshake_era_client_subscribes_and_is_notified(kafka, unique_prefix):
    import mcp.types as types
    from mcp import Client

    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    updated: list[str] = []
    arrived = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()

    async with Client(stdio_server(kafka, unique_prefix), mode="legacy", read_timeout_seconds=60, cache=None,
                      message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe
        await client.subscribe_resource(URI)
        await publish_versions(settings, kafka, make_version(2))
        with anyio.fail_after(NOTIFIED_WITHIN_S):
            await arrived.wait()
        assert updated == [URI]
        assert (await client.read_resource(URI)).contents[0].text.startswith("# playbook pb v2")
        await check_tool(client, 2)


async def test_mcp_over_streamable_http_needs_the_token_and_notifies(kafka, unique_prefix):
    from mcp import Client
    from mcp.client.subscriptions import ResourceUpdated

    settings = run_settings(unique_prefix)
    await create_run_topics(settings, kafka)
    await publish_versions(settings, kafka, make_version(1))
    env = env_without_combee(COMBEE_SERVE_TOKEN="s3cret")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streams.cli", "serve", "--mcp", "http", "--mcp-port", "0", "--port", "0",
        "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix, cwd=str(ROOT), env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = await announced(process, r"MCP \(streamable HTTP\) on (\S+)")
        import httpx2

        unauthorised = await asyncio.to_thread(httpx2.post, url, json={})
        assert unauthorised.status_code == 401
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}, timeout=60)
        from mcp.client.streamable_http import streamable_http_client

        async with http, Client(streamable_http_client(url, http_client=http), cache=None) as client:
            assert [str(r.uri) for r in (await client.list_resources()).resources] == [URI]
            async with client.listen(resource_subscriptions=[URI]) as subscription:
                await publish_versions(settings, kafka, make_version(2))
                with anyio.fail_after(NOTIFIED_WITHIN_S):
                    assert await anext(subscription) == ResourceUpdated(uri=URI)
            await check_tool(client, 2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)

