"""The role-context view waits for the version a call needs: the aggregator's for as long as the pipeline takes to
publish it (its prompt never depends on timing), the reflector's up to a bound (an agent may name any version)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from types import SimpleNamespace

from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from streams.topology.playbook_view import PlaybookVersions

NOW = datetime(2026, 11, 24, tzinfo=UTC)


def _record(version: int, offset: int) -> SimpleNamespace:
    entry = PlaybookEntry(entry_id=f"e{version}", section="tools", content=f"lesson {version}",
                          created_version=version, updated_version=version)
    value = PlaybookVersion(playbook_id="pb", version=version, parent_version=version - 1, batch_id=version - 1,
                            entries=[entry], next_entry_number=version + 1, operations=[], lineage=[f"t{version}"],
                            stats=VersionStats(batch_size=1, k=1, p=1), content_hash=f"{version:064x}",
                            published_at=NOW)
    return SimpleNamespace(value=value.to_json_bytes(), offset=offset)


async def test_without_a_timeout_the_view_waits_for_the_version_itself_however_long_it_takes(caplog):
    view = PlaybookVersions(stage=None)  # type: ignore[arg-type]  # no Kafka: versions are handed in below
    view._take("pb", 1, _record(1, 0))
    waiting = asyncio.create_task(view.at("pb", 3, None, warn_every_s=0.05))
    with caplog.at_level(logging.WARNING):
        await asyncio.sleep(0.3)  # six warning periods: a bounded wait would have fallen back to v1 by now
        assert not waiting.done()
        view._take("pb", 2, _record(2, 1))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # v2 is not the version it needs
        view._take("pb", 3, _record(3, 2))
        playbook = await asyncio.wait_for(waiting, 5)
    assert playbook.version == 3 and [e.content for e in playbook.entries] == ["lesson 3"]
    assert "still waiting for v3" in caplog.text and "using v1" not in caplog.text


async def test_with_a_timeout_the_view_falls_back_to_the_newest_version_and_says_so(caplog):
    view = PlaybookVersions(stage=None)  # type: ignore[arg-type]
    view._take("pb", 1, _record(1, 0))
    with caplog.at_level(logging.WARNING):
        playbook = await view.at("pb", 9, 0.05)  # a trace naming a version this view never gets
    assert playbook.version == 1
    assert "pb v9 did not arrive within 0 s; using v1 as the roles' context" in caplog.text


async def _until(condition, deadline_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + deadline_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _lines(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_many_calls_waiting_for_one_version_make_one_line_with_their_count_not_one_each(caplog):
    """Issue 44: "pbA: still waiting for v4 ..." was logged 1,520 times in a minute, once per waiting trace."""
    now = [0.0]
    view = PlaybookVersions(stage=None, say_every_s=60.0, clock=lambda: now[0])  # type: ignore[arg-type]
    view._take("pb", 1, _record(1, 0))
    with caplog.at_level(logging.WARNING):
        waiting = [asyncio.create_task(view.at("pb", 3, None, warn_every_s=0.05)) for _ in range(50)]
        await _until(lambda: _lines(caplog, "still waiting"))
        await asyncio.sleep(0.3)  # six warning periods of 50 calls: 300 lines when each call said it
        assert _lines(caplog, "still waiting") == [
            "pb: still waiting for v3 as the roles' context after 0 s (newest v1; 50 calls waiting for it)"]
        now[0] = 60.0  # a minute later the condition is said again
        await _until(lambda: len(_lines(caplog, "still waiting")) == 2)
        view._take("pb", 2, _record(2, 1))
        view._take("pb", 3, _record(3, 2))
        assert {p.version for p in await asyncio.wait_for(asyncio.gather(*waiting), 5)} == {3}
        later = asyncio.create_task(view.at("pb", 4, None, warn_every_s=0.05))  # a new condition: said at once
        await _until(lambda: len(_lines(caplog, "still waiting")) == 3)
        later.cancel()
    assert _lines(caplog, "still waiting")[-1].endswith("(newest v3; 1 call waiting for it)")


async def test_falling_back_from_one_version_is_one_line_then_one_per_interval_with_the_calls_since(caplog):
    now = [0.0]
    view = PlaybookVersions(stage=None, say_every_s=60.0, clock=lambda: now[0])  # type: ignore[arg-type]
    view._take("pb", 1, _record(1, 0))
    with caplog.at_level(logging.WARNING):
        await asyncio.gather(*(view.at("pb", 9, 0.01) for _ in range(20)))
        assert _lines(caplog, "did not arrive") == ["pb v9 did not arrive within 0 s; using v1 as the roles' context"]
        now[0] = 61.0
        await view.at("pb", 9, 0.01)
    assert _lines(caplog, "did not arrive")[-1].endswith("using v1 as the roles' context (20 calls since the last "
                                                         "such line)")
