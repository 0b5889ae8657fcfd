"""`combee review` and `combee ui`'s guards on the real broker: decisions written from the command line, one-line
errors with exit 2 on bad input, and a page that wants its token when bound beyond loopback."""

from __future__ import annotations

import aiohttp
import pytest

from combee_core.models import PlaybookEntry, PlaybookVersion, ReviewDecision
from combee_core.serve.review import load_book, reviewed_view
from combee_core.topology import Topic
from streams.review.server import ReviewServer
from streams.topology.topic_reader import read_topic
from tests.integration.test_cli import _combee
from tests.integration.topology_support import publish_first_version, run_settings

pytestmark = [pytest.mark.integration]

PB = "pb"
ENTRIES = [PlaybookEntry(entry_id=f"e{i}", section="general", content=text, created_version=1, updated_version=1)
           for i, text in enumerate(("Check units first.", "Round at the end.", "Cite the source."), start=1)]


async def publish_version(settings, kafka) -> PlaybookVersion:
    return await publish_first_version(settings, kafka, PB, ENTRIES)


async def test_review_commands_write_decisions_and_refuse_bad_input_in_one_line(kafka, unique_prefix):
    settings = run_settings(unique_prefix)
    await publish_version(settings, kafka)
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)

    code, out, err = await _combee("review", "list", PB, *common)
    assert code == 0, err
    assert "served v1" in out and "3 proposed" in out and all(f"e{i} " in out for i in (1, 2, 3))

    assert (await _combee("review", "approve", PB, "e1", "e2", *common, "--reviewer", "ana@host"))[0] == 0
    code, _, err = await _combee("review", "reject", PB, "e3", *common)  # no note
    assert code == 2 and "--note" in err
    assert (await _combee("review", "reject", PB, "e3", "--note", "no source named", *common))[0] == 0
    code, out, err = await _combee("review", "edit", PB, "e2", "--content", "Round only the final answer.", *common,
                                   "--reviewer", "bo@host")
    assert code == 0, err
    code, _, err = await _combee("review", "approve", PB, "e9", *common)
    assert code == 2 and err.strip() == "combee review: pb v1 has no entry e9"
    code, _, err = await _combee("review", "approve", PB, "e1", "--version", "7", *common)
    assert code == 2 and "has no version 7" in err and len(err.strip().splitlines()) == 1

    records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REVIEW))
    decisions = [ReviewDecision.from_json_bytes(r.value) for r in records]
    assert [(d.action, d.reviewer) for d in decisions] == [("approve", "ana@host"), ("reject", decisions[1].reviewer),
                                                           ("edit", "bo@host")]
    view = reviewed_view(PB, 1, ENTRIES, load_book(decisions))
    assert [(e.entry_id, e.content) for e in view.entries] == [("e1", "Check units first."),
                                                               ("e2", "Round only the final answer.")]
    code, out, err = await _combee("review", "list", PB, "--all", *common)
    assert code == 0 and "33% rejected" in out and "no source named" in out, (out, err)


async def test_review_undo_takes_a_decision_back_from_the_command_line(kafka, unique_prefix):
    settings = run_settings(unique_prefix)
    await publish_version(settings, kafka)
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    assert (await _combee("review", "approve", PB, "e1", "e2", *common))[0] == 0
    assert (await _combee("review", "reject", PB, "e2", "--note", "too vague", *common))[0] == 0
    code, out, err = await _combee("review", "list", PB, "--decisions", *common)
    assert code == 0, err
    approve_id, reject_id = (line.split()[0] for line in out.strip().splitlines())

    code, out, err = await _combee("review", "undo", PB, reject_id, *common, "--reviewer", "Jane Doe")
    assert code == 0 and out.strip().startswith(f"pb: undid decision {reject_id} on e2 by Jane Doe"), (out, err)
    code, _, err = await _combee("review", "undo", PB, reject_id[:8], *common)
    assert code == 2 and err.strip().startswith(f"combee review: decision {reject_id} was already undone by Jane Doe")
    code, _, err = await _combee("review", "undo", PB, "ffffffff", *common)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "has no review decision ffffffff" in err

    records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REVIEW))
    decisions = [ReviewDecision.from_json_bytes(r.value) for r in records]
    assert [d.action for d in decisions] == ["approve", "reject", "undo"]
    assert decisions[2].undoes is not None and decisions[2].undoes.startswith(reject_id)
    view = reviewed_view(PB, 1, ENTRIES, load_book(decisions))  # e2 back to its approval
    assert [e.entry_id for e in view.entries] == ["e1", "e2"]
    code, out, _ = await _combee("review", "list", PB, "--decisions", *common)
    assert f"{reject_id} " in out and "[undone]" in out.splitlines()[1] and "undo" in out.splitlines()[2]


async def test_the_page_wants_its_token_beyond_loopback(kafka, unique_prefix):
    settings = run_settings(unique_prefix)
    code, _, err = await _combee("ui", "--host", "0.0.0.0", "--bootstrap", kafka.bootstrap)
    assert code == 2 and "COMBEE_UI_TOKEN" in err and len(err.strip().splitlines()) == 1
    await publish_version(settings, kafka)
    async with ReviewServer(settings, kafka.bootstrap, kafka.profile, "ana@host", host="0.0.0.0", token="s3cret") \
            as server, aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        base = f"http://127.0.0.1:{server.port}"
        async with session.get(f"{base}/p/{PB}") as response:
            assert response.status == 401
        async with session.get(f"{base}/p/{PB}?token=s3cret", allow_redirects=False) as response:
            assert response.status == 303 and "token" not in response.headers["Location"]
        async with session.get(f"{base}/p/{PB}") as response:  # the cookie carries it now
            assert response.status == 200 and "e1" in await response.text()
        async with session.post(f"{base}/p/{PB}/decide", data={"one": "approve:e1", "csrf": "forged"}) as response:
            assert response.status == 403  # a form not from the page
    assert await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REVIEW)) == []
