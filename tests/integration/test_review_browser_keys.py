"""The review page's focused view worked through with the keyboard only, in headless Chromium on the real broker:
search, approve and move on, reject with a note, undo, next/previous, then the Undo button of the decisions table;
what agents are served follows, the page keeps the search after each decision, and the log replays byte-identically."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from combee_core.models import PlaybookEntry, ReviewDecision
from combee_core.serve.review import review_state
from combee_core.topology import Topic
from streams.review.log import read_snapshot
from streams.review.server import ReviewServer
from streams.testing.browser import headless_chromium
from streams.topology.follower import PlaybookFollower
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import publish_first_version, run_settings, write_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "pb"
TEXTS = ("Check the units of every quantity first.", "Convert units before adding two amounts.",
         "Write the units on every answer.", "Sort dates ascending before comparing them.",
         "Quote the source of each figure.", "Round only the final answer.")
ENTRIES = [PlaybookEntry(entry_id=f"e{i}", section="math" if i < 4 else "general", content=text, created_version=1,
                         updated_version=1) for i, text in enumerate(TEXTS, start=1)]



def keyboard_through(url: str, screenshot: str | None) -> dict:
    """In Chromium, keys only on the focused view; then the Undo button of the whole page's decisions table."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict = {}
    with headless_chromium() as browser:
        wait = WebDriverWait(browser, 60)

        def press(keys: str) -> None:
            ActionChains(browser).send_keys(keys).perform()

        def shows(entry_id: str, flash: str = "") -> None:
            wait.until(lambda drv: drv.find_elements(By.ID, f"focus-{entry_id}") and
                       (not flash or flash in drv.find_element(By.ID, "flash").text))

        def position() -> str:
            return browser.find_element(By.ID, "focus-at").text

        browser.get(f"{url}p/{PB}/focus")
        shows("e1")
        seen["keys_legend"] = browser.find_element(By.ID, "keys").text
        press("/")  # the search field
        wait.until(lambda drv: drv.switch_to.active_element.get_attribute("id") == "search")
        press("units\n")
        wait.until(lambda drv: "q=units" in drv.current_url)
        shows("e1")
        seen["first"] = position()
        press("a")  # approve e1, and the next one shows
        shows("e2", "approve e1 by reviewer@test")
        seen["after_approve"] = (position(), browser.current_url)
        press("r")  # the reject note; Enter rejects
        wait.until(lambda drv: drv.switch_to.active_element.get_attribute("id") == "note")
        press("Too vague to act on.\n")
        shows("e3", "reject e2 by reviewer@test")
        press("u")  # undo the rejection: e2 is back in the filter
        shows("e2", "undid reject e2 by reviewer@test")
        seen["after_undo"] = position()
        press("j")
        shows("e3")
        press("k")
        shows("e2")
        press("j")
        shows("e3")
        press("a")  # approve e3: e2 is the one left
        shows("e2", "approve e3 by reviewer@test")
        seen["last"] = position()
        if screenshot:
            browser.set_window_size(1100, 900)
            browser.save_screenshot(screenshot)
        browser.get(f"{url}p/{PB}?q=units")  # the whole page: the decisions table's Undo on e1's approval
        wait.until(lambda drv: drv.find_elements(By.ID, "decisions"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#decisions tr[id^='decision-']")
        seen["decision_rows"] = [(r.get_attribute("class") or "", r.text) for r in rows]
        approval = next(r for r in rows if " approve e1 " in f" {r.text} ")
        approval.find_element(By.CSS_SELECTOR, "form.undo button").click()
        wait.until(lambda drv: drv.find_elements(By.ID, "flash") and
                   "undid approve e1" in drv.find_element(By.ID, "flash").text)
        seen["list_url"] = browser.current_url
        seen["inbox_after"] = [row.get_attribute("id")[4:] for row in
                               browser.find_elements(By.CSS_SELECTOR, "#inbox tr[id^='row-']")]
    return seen


async def test_a_reviewer_works_through_the_focused_view_with_keys_and_undoes_from_the_page(
        kafka, unique_prefix, browser_ready):
    settings = run_settings(unique_prefix, review_playbooks=PB)
    await publish_first_version(settings, kafka, PB, ENTRIES)
    async with PlaybookFollower(settings, kafka.bootstrap, kafka.profile) as agents:
        await agents.wait_until(lambda: PB in agents.latest, 60, "the playbook's version")
        assert agents.playbook(PB) == (1, [])
        async with ReviewServer(settings, kafka.bootstrap, kafka.profile, "reviewer@test") as server:
            seen = await asyncio.to_thread(keyboard_through, server.url,
                                           os.environ.get("COMBEE_REVIEW_FOCUS_SCREENSHOT"))
            snapshot = await read_snapshot(settings, kafka.bootstrap, kafka.profile, PB)

        assert "a approve" in seen["keys_legend"] and "u undo" in seen["keys_legend"]
        assert seen["first"] == "1 of 3"
        assert seen["after_approve"][0] == "1 of 2" and "q=units" in seen["after_approve"][1]
        assert seen["after_undo"] == "1 of 2" and seen["last"] == "1 of 1"
        assert "q=units" in seen["list_url"] and "/focus" not in seen["list_url"]
        assert seen["inbox_after"] == ["e1", "e2"]  # the search kept: e1 back, e2's rejection undone
        assert [cls for cls, _ in seen["decision_rows"]] == ["", "", "undone", ""]  # newest first, before the undo
        await agents.wait_until(lambda: [e.entry_id for e in agents.playbook(PB)[1]] == ["e3"], 30,
                                "only e3 served")

    records = [r.value for r in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REVIEW))]
    decisions = [ReviewDecision.from_json_bytes(value) for value in records]
    assert [(d.action, [i.entry_id for i in d.items]) for d in decisions] == [
        ("approve", ["e1"]), ("reject", ["e2"]), ("undo", ["e2"]), ("approve", ["e3"]), ("undo", ["e1"])]
    assert decisions[1].note == "Too vague to act on."
    assert (decisions[2].undoes, decisions[4].undoes) == (decisions[1].decision_id, decisions[0].decision_id)
    assert snapshot.state.undone == [decisions[1].decision_id, decisions[0].decision_id]

    replayed = f"{unique_prefix}replay.{Topic.REVIEW}"  # the same records on another topic fold to the same bytes
    await write_records(kafka, replayed, records, PB)
    again = [ReviewDecision.from_json_bytes(r.value) for r in await read_topic(kafka.bootstrap, kafka.profile,
                                                                                 replayed)]
    assert review_state(PB, snapshot.versions, snapshot.served, again).to_json_bytes() == \
        snapshot.state.to_json_bytes()
    if os.environ.get("COMBEE_REVIEW_FOCUS_SCREENSHOT"):
        assert Path(os.environ["COMBEE_REVIEW_FOCUS_SCREENSHOT"]).stat().st_size > 0
