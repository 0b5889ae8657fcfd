"""A restarted guard reads ``traces`` from its checkpoints, not from the beginning, and decides as one that read
everything (``Guard.floor``, ``streams/topology/views/live_traces.py``).

The guard runs alone on 70 versions of a playbook written to ``playbook`` (each on the one before), so it keeps
v7..v70 and v1 is no longer judged against v0. Traces: 10 of v0 and 5 of v3 (below the floor), 40 good ones of v7
and 5 of v70 (taken once v70 is seen: every decision names v70 as the newest); the guard checkpoints
``guard/traces/0`` at v7's first trace (offset 15) and stops. A new guard starts;
20 bad traces of v8 come. It must say it resumed at offset 15, and roll v8 back to v7 against all 40 traces of v7,
which are before the restart; a guard on fresh topics that reads the same versions and traces from the beginning
makes the same decision byte for byte."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

from combee_core.models import Trace, ViewCheckpoint
from combee_core.topology import Topic
from streams.testing.playbooks import make_version, publish_versions
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ensure_topics
from tests.integration.topology_support import make_traces, run_settings, wait_decisions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "pb-guard-restart"
NEWEST, FLOOR = 70, 7
"""Versions 1..70; the guard keeps the newest 64: v7..v70."""


def live(traces: list[Trace], version: int, success: bool) -> list[Trace]:
    return [t.model_copy(update=dict(playbook_version=version, success=success)) for t in traces]


def streams() -> tuple[list[Trace], list[Trace]]:
    """(before the restart, after it)."""
    traces = make_traces(100, PB, agents=10)
    before = (live(traces[:10], 0, True) + live(traces[10:15], 3, False) + live(traces[15:55], FLOOR, True)
              + live(traces[55:60], NEWEST, True))
    return before, live(traces[60:80], FLOOR + 1, False)


def settings_for(prefix: str):
    return run_settings(prefix, partitions=1, view_checkpoint_every=2, guard_min_traces=10)


async def start(settings, kafka) -> None:
    """Topics and the 70 versions, before the guard starts."""
    await ensure_topics(settings, kafka.bootstrap, connection=kafka.profile.connection)
    await publish_versions(settings, kafka, *[make_version(n, PB) for n in range(1, NEWEST + 1)])


async def checkpoint_at(settings, kafka, position: int, deadline: float) -> None:
    """Wait for the guard's ``guard/traces/0`` checkpoint at ``position``. A checkpoint is written as traces are
    read, and gives the floor of the versions the guard has seen then: while none is at ``position`` (its view of
    ``playbook`` may be behind), a trace of another playbook (after ``position``: it moves nothing) makes another."""
    nudge = make_traces(1, "pb-other")[0]
    while time.monotonic() < deadline:
        for _ in range(8):
            records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.CHECKPOINTS))
            checkpoints = [ViewCheckpoint.from_json_bytes(r.value) for r in records]
            if position in [c.position for c in checkpoints if c.view == "guard/traces/0"]:
                return
            await asyncio.sleep(0.5)
        await produce_traces(settings, kafka.bootstrap, kafka.profile, [nudge])
    raise AssertionError(f"no guard/traces/0 checkpoint at {position} in time")


async def test_a_restarted_guard_resumes_at_its_floor_and_decides_as_a_replay(kafka, unique_prefix, caplog):
    caplog.set_level(logging.INFO, logger="streams")
    settings = settings_for(unique_prefix)
    before, after = streams()
    began = time.monotonic()
    await start(settings, kafka)
    setup = time.monotonic() - began  # topics and 70 versions written at this load: the unit of the first deadline
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("guard",)) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, before)
        await checkpoint_at(settings, kafka, 15, deadline=time.monotonic() + max(60.0, 40 * setup))  # v7's first
        assert await run.promotions() == []
    took = time.monotonic() - began  # and a start, 60 traces and a checkpoint: the unit of the next ones
    print(f"setup {setup:.1f} s, to the checkpoint {took:.1f} s")

    caplog.clear()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("guard",)) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, after)
        found = await wait_decisions(run, 1, timeout_s=max(60.0, 10 * took))
    resumed = re.findall(r"guard/traces/0: resumed from its checkpoint at offset (\d+)", caplog.text)
    assert resumed == ["15"], caplog.text[-3000:]
    assert [(d.action, d.by, d.candidate_version, d.served_version) for d in found] == [
        ("rollback", "guard", FLOOR + 1, FLOOR)], [d.reason for d in found]
    test = found[0].live_test
    assert test is not None and test.parent_traces == 40 and test.traces == 10, test

    replay = settings_for(f"{unique_prefix[:-1]}r.")
    await start(replay, kafka)
    caplog.clear()
    async with InProcessPipeline(replay, kafka.bootstrap, kafka.profile, stages=("guard",)) as run:
        await produce_traces(replay, kafka.bootstrap, kafka.profile, before + after)
        again = await wait_decisions(run, 1, timeout_s=max(60.0, 10 * took))
    assert "resumed from its checkpoint" not in caplog.text
    assert [d.decision_hash() for d in again] == [d.decision_hash() for d in found], [d.reason for d in again]
