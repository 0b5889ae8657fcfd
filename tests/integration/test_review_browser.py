"""Review mode end to end on the real broker, clicked through in headless Chromium: a reviewer approves, rejects
(with a note), edits and bulk-approves proposed entries on `combee ui`'s page, then filters the inbox to the rejected
ones; the agents' served entries change accordingly, and the decisions replay byte-identically."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from combee_core.models import PlaybookVersion, ReviewDecision
from combee_core.serve.review import review_state
from combee_core.topology import Topic
from streams.review.log import read_snapshot
from streams.review.server import ReviewServer
from streams.testing.browser import headless_chromium
from streams.topology.follower import PlaybookFollower
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import make_traces, run_settings, write_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "pb"
EDITED = "Check the units of every quantity before computing anything."


def click_through(url: str, screenshot: str | None) -> dict:
    """In Chromium: of the inbox's first five entries, approve the 1st, reject the 2nd with a note, edit the 3rd,
    bulk-approve the 4th and 5th; read the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    seen: dict = {}
    with headless_chromium() as browser:
        wait = WebDriverWait(browser, 60)

        def after(expected: str) -> None:
            wait.until(lambda drv: expected in (drv.find_elements(By.ID, "flash") or [None])[0].text
                       if drv.find_elements(By.ID, "flash") else False)

        browser.get(url)  # one playbook: the index redirects to its page
        wait.until(lambda drv: drv.find_elements(By.ID, "inbox"))
        seen["inbox_before"] = [row.get_attribute("id")[4:] for row in
                                browser.find_elements(By.CSS_SELECTOR, "#inbox tr[id^='row-']")]
        a, b, c, d, e = seen["inbox_before"][:5]
        browser.find_element(By.CSS_SELECTOR, f"button[value='approve:{a}']").click()
        after(f"approve {a}")
        browser.find_element(By.NAME, f"note:{b}").send_keys("Too vague to act on.")
        browser.find_element(By.CSS_SELECTOR, f"button[value='reject:{b}']").click()
        after(f"reject {b}")
        row = browser.find_element(By.ID, f"row-{c}")
        row.find_element(By.TAG_NAME, "summary").click()
        text = row.find_element(By.NAME, f"content:{c}")
        text.clear()
        text.send_keys(EDITED)
        row.find_element(By.CSS_SELECTOR, f"button[value='edit:{c}']").click()
        after(f"edit {c}")
        for entry_id in (d, e):
            browser.find_element(By.CSS_SELECTOR, f"input[type=checkbox][value='{entry_id}']").click()
        browser.find_element(By.ID, "bulk-approve").click()
        after(f"approve {d}, {e}")
        seen["inbox_after"] = [row.get_attribute("id")[4:] for row in
                               browser.find_elements(By.CSS_SELECTOR, "#inbox tr[id^='row-']")]
        seen["approved_count"] = browser.find_element(By.ID, "approved-count").text
        seen["rejection_rate"] = browser.find_element(By.ID, "rejection-rate").text
        seen["served_rows"] = {r.get_attribute("data-entry"): r.text for r in
                               browser.find_elements(By.CSS_SELECTOR, "#served tr[data-entry]")}
        if screenshot:  # the whole page (docs/review.md)
            browser.set_window_size(1280, min(4000, browser.execute_script("return document.body.scrollHeight") + 40))
            browser.save_screenshot(screenshot)
        Select(browser.find_element(By.NAME, "state")).select_by_value("rejected")  # the inbox filter
        browser.find_element(By.ID, "filter-apply").click()
        wait.until(lambda drv: "state=rejected" in drv.current_url)
        seen["rejected_rows"] = [row.get_attribute("id")[4:] for row in
                                 browser.find_elements(By.CSS_SELECTOR, "#inbox tr[id^='row-']")]
        seen["evidence"] = browser.find_element(By.ID, f"evidence-{b}").text
        browser.find_element(By.CSS_SELECTOR, f"#served a[href$='/entry/{a}']").click()  # its provenance
        wait.until(lambda drv: drv.find_elements(By.ID, "reflections"))
        seen["history_rows"] = len(browser.find_elements(By.CSS_SELECTOR, "#history tr"))
        seen["reflection_rows"] = len(browser.find_elements(By.CSS_SELECTOR, "#reflections tr")) - 1
        seen["likeness_floor"] = browser.find_element(By.ID, "likeness-floor").text
        seen["trace_rows"] = len(browser.find_elements(By.CSS_SELECTOR, "#traces tr")) - 1
        seen["statuses"] = browser.find_element(By.ID, "statuses").text
    return seen


async def test_a_reviewer_clicks_through_approve_reject_edit_and_bulk_and_agents_get_only_approved_entries(
        kafka, unique_prefix, browser_ready):
    settings = run_settings(unique_prefix, batch_size=20, partitions=1, review_playbooks=PB)
    traces = make_traces(40, PB)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile,
                                 stages=("reflect", "batch", "aggregate", "reduce")) as run, \
            PlaybookFollower(settings, kafka.bootstrap, kafka.profile, check_alive=run.check_alive) as learning:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        await learning.wait_incorporated({t.trace_id for t in traces}, 180, "every trace in a version")
    async with PlaybookFollower(settings, kafka.bootstrap, kafka.profile) as agents:
        await agents.wait_until(lambda: PB in agents.latest, 60, "the playbook's versions")
        served_version, served_entries = agents.unreviewed(PB)
        assert served_version >= 1 and len(served_entries) >= 5
        assert agents.playbook(PB) == (served_version, [])  # review on: nothing approved yet, nothing served

        async with ReviewServer(settings, kafka.bootstrap, kafka.profile, "reviewer@test") as server:
            seen = await asyncio.to_thread(click_through, server.url, os.environ.get("COMBEE_REVIEW_SCREENSHOT"))
            snapshot = await read_snapshot(settings, kafka.bootstrap, kafka.profile, PB)

        inbox = seen["inbox_before"]
        a, b, c, d, e = inbox[:5]
        assert sorted(inbox) == sorted(entry.entry_id for entry in served_entries)  # every served entry waited
        assert seen["inbox_after"] == inbox[5:]
        assert seen["approved_count"] == "4" and seen["rejection_rate"] == "20%"
        assert set(seen["served_rows"]) == {a, c, d, e} and EDITED in seen["served_rows"][c]
        assert "edited by reviewer@test" in seen["served_rows"][c]
        assert seen["history_rows"] >= 1 and seen["reflection_rows"] >= 1 and seen["trace_rows"] >= 1
        assert "approved" in seen["statuses"]
        assert seen["rejected_rows"] == [b] and "outcome" in seen["evidence"] and "support" in seen["evidence"]
        assert "at likeness 0.30 or more" in seen["likeness_floor"]

        def served_now() -> dict[str, str]:
            return {entry.entry_id: entry.content for entry in agents.playbook(PB)[1]}

        await agents.wait_until(lambda: set(served_now()) == {a, c, d, e}, 30, "the approved entries served")
        by_id = {entry.entry_id: entry.content for entry in served_entries}
        assert served_now() == {a: by_id[a], c: EDITED, d: by_id[d], e: by_id[e]}

    records = [r.value for r in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REVIEW))]
    decisions = [ReviewDecision.from_json_bytes(value) for value in records]
    assert [(x.action, [i.entry_id for i in x.items]) for x in decisions] == \
        [("approve", [a]), ("reject", [b]), ("edit", [c]), ("approve", [d, e])]
    assert decisions[1].note == "Too vague to act on." and {x.reviewer for x in decisions} == {"reviewer@test"}

    # a replay: the same records on another run's review topic fold to the same bytes
    replayed = f"{unique_prefix}replay.{Topic.REVIEW}"
    await write_records(kafka, replayed, records, PB)
    again = [r.value for r in await read_topic(kafka.bootstrap, kafka.profile, replayed)]
    assert again == records
    versions = [PlaybookVersion.from_json_bytes(r.value) for r in
                await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.PLAYBOOK))]
    served = snapshot.served
    original = review_state(PB, versions, served, decisions).to_json_bytes()
    assert review_state(PB, versions, served, [ReviewDecision.from_json_bytes(v) for v in again]).to_json_bytes() \
        == original == snapshot.state.to_json_bytes()
    if os.environ.get("COMBEE_REVIEW_SCREENSHOT"):
        assert Path(os.environ["COMBEE_REVIEW_SCREENSHOT"]).stat().st_size > 0
