"""A fault test's wait for a run to be accounted for fails, in one line naming the stage and how far behind it is,
when a stage still has input it has not committed at the deadline (it used to add a note to the audit and let a
run whose topics were still changing pass)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streams.broker.profile import BrokerProfile
from streams.testing import worker_fleet
from streams.testing.worker_fleet import StagesBehind, WorkerFleet, fleet_settings, wait_accounted


def _fleet(tmp_path) -> WorkerFleet:
    broker = SimpleNamespace(bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"))
    return WorkerFleet(broker, "t.", tmp_path)  # type: ignore[arg-type]


def _lags(monkeypatch, *lags: dict[str, int]) -> None:
    """The stages' lag at each look (the last one repeats), and empty topics."""
    seen = list(lags)

    async def collect_status(*args: object) -> SimpleNamespace:
        return SimpleNamespace(lag=seen.pop(0) if len(seen) > 1 else seen[0])

    async def read_run(*args: object) -> tuple[list, list, list]:
        return [], [], []

    monkeypatch.setattr(worker_fleet, "collect_status", collect_status)
    monkeypatch.setattr(worker_fleet, "read_run", read_run)


async def test_a_stage_still_behind_at_the_deadline_fails_the_wait_naming_it(monkeypatch, tmp_path):
    _lags(monkeypatch, {"reduce": 3, "batch": 0, "reflect": 1})
    fleet = _fleet(tmp_path)
    with pytest.raises(StagesBehind) as raised:
        await wait_accounted(fleet_settings("t."), fleet.broker, fleet, set(), 0.2)
    message = str(raised.value)
    assert "\n" not in message
    behind = "reduce has 3 record(s) of input not committed"
    assert behind in message and "reflect has 1 record(s)" in message and "batch" not in message, message


async def test_a_stage_that_catches_up_before_the_deadline_lets_the_audit_run(monkeypatch, tmp_path):
    _lags(monkeypatch, {"reduce": 3}, {"reduce": 0})
    fleet = _fleet(tmp_path)
    audit = await wait_accounted(fleet_settings("t."), fleet.broker, fleet, set(), 30)
    assert audit.problems() == []
