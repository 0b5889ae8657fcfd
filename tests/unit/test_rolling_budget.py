"""The rolling change budget (``combee_core.reduce.rolling``): a run of hostile batches changes at most the rolling
budget of the playbook as it stood before them, and a reducer restarted from the versions decides the same."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from combee_core.models import DeleteOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, UpdateOp, Usage
from combee_core.playbook import Playbook
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.settings import CombeeSettings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENTRIES = 40


def _established() -> Playbook:
    return Playbook.from_entries("pb", 2, [
        PlaybookEntry(entry_id=f"gen-{n:05d}", section="general", content=f"Rule number {n} about column {n}.",
                      created_version=1, updated_version=1) for n in range(1, ENTRIES + 1)])


def _hostile(version: int) -> list[Operation]:
    """An aggregator obeying an injection: delete every entry, then rewrite every entry."""
    ids = [f"gen-{n:05d}" for n in range(1, ENTRIES + 1)]
    return [*(DeleteOp(entry_id=i) for i in ids[::2]), *(UpdateOp(entry_id=i, content=f"Ignore rule {i}.")
                                                         for i in ids[1::2])]


def _partial(version: int) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=version, node=0, k=1, base_version=version,
                         operations=_hostile(version), reflection_ids=[f"r{version}"], trace_ids=[f"t{version}"],
                         items_read=1, expected_items=1, usage=Usage(), batch_closed_at=NOW)


async def _union(children: list[list[Operation]], context: str) -> ReduceOutcome:
    return ReduceOutcome([op for ops in children for op in ops], Usage(), 0.0)


def _config(**overrides: object) -> ReducerConfig:
    return ReducerConfig(**{**ReducerConfig.from_settings(CombeeSettings.load({})).__dict__,  # type: ignore[arg-type]
                            "ask_reducer": False, **overrides})


def _next(reducer: Reducer, logs: ReducerLogs) -> PlaybookVersion:
    playbook = logs.playbook("pb")
    effects = asyncio.run(reducer.next_version(playbook, [_partial(playbook.version)], parent_version=None,
                                               manifest=None, previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    logs.take_version(record)
    return record


def _run(batches: int, **overrides: object) -> list[PlaybookVersion]:
    logs = ReducerLogs(playbooks={"pb": _established()})
    reducer = Reducer(_config(**overrides), _union)
    return [_next(reducer, logs) for _ in range(batches)]


def _changed(records: list[PlaybookVersion]) -> set[str]:
    before = {e.entry_id: e.content for e in _established().entries}
    after = {e.entry_id: e.content for e in records[-1].entries}
    return {i for i, content in before.items() if after.get(i) != content}


def test_four_hostile_batches_in_a_row_change_at_most_the_rolling_budget() -> None:
    settings = CombeeSettings.load({})
    assert (settings.playbook_change_cap, settings.playbook_rolling_change_cap) == (0.25, 0.4)
    records = _run(4)
    assert len(_changed(records)) == 16  # floor(0.4 x 40) of the playbook as it stood before the run
    assert sum(1 for e in records[-1].entries if e.content.startswith("Rule")) == ENTRIES - 16
    reasons = [a.reason for a in records[-1].operations
               if a.outcome == "rejected" and not a.reason.startswith("unknown entry id")]  # deleted before
    assert reasons and all(r.startswith(("rolling change budget", "change cap")) for r in reasons)
    assert any("may change at most 16 of its 40 entries, 16 changed before this version" in r for r in reasons)
    without = _run(4, rolling_share=None)  # the per-version cap alone compounds: 10 + 7 + 5 + 5 of 40
    assert len(_changed(without)) == 27


def test_the_budget_comes_back_once_the_run_is_older_than_the_window() -> None:
    records = _run(10, rolling_versions=4)
    per_version = [sum(1 for a in r.operations if a.outcome == "applied") for r in records]
    assert per_version[:4] == [10, 6, 0, 0]  # 0.4 x 40 = 16 within any 4 versions
    assert per_version[4] > 0  # the run of v3..v6 rests on v2 no more


def test_a_reducer_restarted_from_the_latest_version_decides_as_one_that_never_stopped() -> None:
    straight = _run(6)
    logs = ReducerLogs(playbooks={"pb": _established()})
    restarted: list[PlaybookVersion] = []
    for _ in range(6):
        record = _next(Reducer(_config(), _union), logs)  # a new reducer each version
        restarted.append(record)
        logs = ReducerLogs()
        logs.take_version(PlaybookVersion.from_json_bytes(record.to_json_bytes()))  # all it has is the log
    assert [r.to_json_bytes() for r in restarted] == [r.to_json_bytes() for r in straight]
