"""Review mode on every door, on the real broker: with ``COMBEE_REVIEW_PLAYBOOKS`` set, ``combee serve``'s HTTP API
(the served version, a version by number, the context for a task, the listing) and its MCP resource and tool give
agents only the approved entries, a decision refreshes what they get (a new entity tag wakes a long-poll), and
``combee tail`` marks where review stands on each entry and prints each decision."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace

import aiohttp
import pytest

from combee_core.models import AddOp, AppliedOperation, PlaybookVersion, ReviewDecision, utc_now
from combee_core.serve.review import items_for
from streams.review.log import write_decision
from streams.serving.http import ServeHttp
from streams.serving.served import ServedPlaybooks
from streams.testing.playbooks import create_run_topics, make_version, publish_versions
from streams.topology.observe import tail_versions
from tests.integration.topology_support import run_settings

pytestmark = pytest.mark.integration

TASK = "the network call timed out: retry it"

STDIO = SimpleNamespace(request=None)
"""A request context as the stdio transport gives one: no HTTP request, so no key to check (the handlers are called
in process here; tests/unit/test_door_mcp.py checks keys over HTTP)."""


def _decision(version: PlaybookVersion, action: str, *ids: str, note: str = "") -> ReviewDecision:
    return ReviewDecision.make(playbook_id=version.playbook_id, action=action, items=items_for(version, list(ids)),
                               note=note, edit=None, reviewer="ana@host", decided_at=utc_now())


def _with_adds(version: PlaybookVersion) -> PlaybookVersion:
    """The version as the reducer writes one: an applied ADD per entry (what ``combee tail`` prints)."""
    operations = [AppliedOperation(operation=AddOp(section=e.section, content=e.content), outcome="applied",
                                   entry_id=e.entry_id) for e in version.entries]
    return version.model_copy(update={"operations": operations})


async def _reviewed_run(kafka, prefix: str, **values: object):
    settings = run_settings(prefix, review_playbooks="pb", **values)
    await create_run_topics(settings, kafka)
    v1 = _with_adds(make_version(1))
    await publish_versions(settings, kafka, v1)
    await write_decision(settings, kafka.bootstrap, kafka.profile, _decision(v1, "approve", "pb-0", "pb-4"))
    await write_decision(settings, kafka.bootstrap, kafka.profile,
                         _decision(v1, "reject", "pb-1", note="not what the runs showed"))
    return settings, v1


async def test_http_and_mcp_serve_only_the_approved_entries_and_a_decision_refreshes_them(kafka, unique_prefix):
    import mcp.types as types  # here, not at collection: the MCP SDK costs ~2 CPU-s per xdist worker

    from streams.serving.mcp_server import TOOL, PlaybookMcp

    settings, v1 = await _reviewed_run(kafka, unique_prefix, serve_port=0)
    unreviewed = [e.content for e in v1.entries if e.entry_id not in ("pb-0", "pb-4")]
    async with ServedPlaybooks(settings, kafka.bootstrap, kafka.profile) as served, \
            ServeHttp(settings, served) as http, aiohttp.ClientSession(http.url) as client:
        async with client.get("/playbooks/pb") as response:
            body = PlaybookVersion.model_validate_json(await response.read())
            tag = response.headers["ETag"]
        assert [e.entry_id for e in body.entries] == ["pb-0", "pb-4"] and body.operations == []
        async with client.get("/playbooks/pb/versions/1") as response:
            by_number = PlaybookVersion.model_validate_json(await response.read())
            assert response.headers["Cache-Control"] == "no-cache"  # a decision changes it
        assert by_number.entries == body.entries and by_number.operations == []
        async with client.get("/playbooks/pb/context", params={"task": TASK, "k": "7"}) as response:
            context = await response.json()
        assert set(context["included_entry_ids"]) <= {"pb-0", "pb-4"}
        assert not any(text in context["text"] for text in unreviewed)
        async with client.get("/playbooks") as response:
            assert [p["entries"] for p in await response.json()] == [2]

        mcp = PlaybookMcp(served)
        read = await mcp._read_resource(STDIO, types.ReadResourceRequestParams(uri="playbook://pb"))  # type: ignore
        text = read.contents[0].text
        assert v1.entries[0].content in text and not any(t in text for t in unreviewed)
        called = await mcp._call_tool(STDIO, types.CallToolRequestParams(  # type: ignore[arg-type]
            name=TOOL, arguments={"playbook_id": "pb", "task": TASK, "k": 7}))
        assert set(called.structured_content["included_entry_ids"]) <= {"pb-0", "pb-4"}

        poll = asyncio.create_task(client.get("/playbooks/pb?wait=60", headers={"If-None-Match": tag}))
        await write_decision(settings, kafka.bootstrap, kafka.profile, _decision(v1, "approve", "pb-2"))
        async with await asyncio.wait_for(poll, 30) as response:  # same version, new reviewed content: new tag
            assert response.status == 200 and response.headers["ETag"] != tag
            woken = PlaybookVersion.model_validate_json(await response.read())
        assert [e.entry_id for e in woken.entries] == ["pb-0", "pb-2", "pb-4"]


async def test_tail_marks_the_review_state_of_each_entry_and_prints_each_decision(kafka, unique_prefix):
    settings, v1 = await _reviewed_run(kafka, unique_prefix)
    out = io.StringIO()
    stop = asyncio.Event()
    tail = asyncio.create_task(tail_versions(settings, kafka.bootstrap, kafka.profile, playbook_id="pb", limit=2,
                                             stop=stop, out=out))
    deadline = asyncio.get_running_loop().time() + 30
    while "pb v1" not in out.getvalue():
        assert asyncio.get_running_loop().time() < deadline and not tail.done(), out.getvalue()
        await asyncio.sleep(0.1)
    await write_decision(settings, kafka.bootstrap, kafka.profile, _decision(v1, "approve", "pb-2"))
    await publish_versions(settings, kafka, _with_adds(make_version(2)))
    assert await asyncio.wait_for(tail, 30) == 2
    lines = out.getvalue().splitlines()
    marked = {line.split("]")[0].strip(" +[") : line for line in lines[:9] if line.startswith("  + [")}
    assert marked["pb-0"].endswith("(approved)") and marked["pb-4"].endswith("(approved)")
    assert marked["pb-1"].endswith("(rejected; withheld from agents)")
    assert marked["pb-3"].endswith("(awaiting review; withheld from agents)")
    assert "  review: agents get 2 of 7 entries (4 awaiting review)" in lines
    assert any(line.startswith("pb review ") and ": approve pb-2 by ana@host" in line for line in lines)
