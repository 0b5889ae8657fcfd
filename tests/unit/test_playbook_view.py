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
