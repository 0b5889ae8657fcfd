"""A stopped worker leaves its consumer groups, so a worker started in the same groups is assigned without waiting
for the old members' sessions to run out (``streams/broker/group_leave.py``).

On Tansu a group's first generation is 0, at which aiokafka's ``stop()`` sent no LeaveGroup: the old members stayed
in their groups until their session timeout, and a restarted pipeline got its partitions after 11.3 s against
3.1 s fresh. Here every stage of a pipeline stops; right after, each of their groups has no member left (asked of
the broker, long before a session could have expired); then a second pipeline in the same groups owns its partitions
before the old members' sessions could have expired.

The session timeout is raised to :data:`SESSION_MS` in this test so that the two outcomes lie far apart whatever the
load: Tansu holds a JoinGroup for half the session timeout (8 s, plus what load adds: +3.4 s seen at load 20), while
an old member that did not leave holds the group at least a session timeout less one heartbeat (15 s) after the
stop.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from streams.broker.connection import client_kwargs
from streams.topology.pipeline import InProcessPipeline
from streams.topology.worker import ALL_STAGES, runnable
from tests.integration.topology_support import run_settings

pytestmark = pytest.mark.integration

SESSION_MS = 16_000


async def _members(kafka, groups: list[str]) -> dict[str, list[str]]:
    """The member ids the broker lists for each group."""
    admin = AIOKafkaAdminClient(**client_kwargs(kafka.bootstrap, kafka.profile.connection))
    await admin.start()
    try:
        found: dict[str, list[str]] = {}
        for asked in groups:  # one a request: Tansu's answer for several groups at once does not decode
            for response in await admin.describe_consumer_groups([asked]):
                for group in response.groups:
                    error_code, name, *_, members = group
                    assert error_code == 0, (name, error_code)
                    found[name] = [member[0] for member in members]
        return found
    finally:
        await admin.close()


async def _owned_at(run: InProcessPipeline, stages: list[str], timeout_s: float) -> dict[str, float]:
    """When (monotonic) each stage first owned partitions of its input, waiting up to ``timeout_s``."""
    owned: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(owned) < len(stages):
        run.check_alive()
        assert time.monotonic() < deadline, f"only {sorted(owned)} of {stages} own partitions after {timeout_s} s"
        for name in stages:
            if name not in owned and run.counters.get(f"partitions_acquired.{name}", 0) > 0:
                owned[name] = time.monotonic()
        await asyncio.sleep(0.05)
    return owned


async def test_a_stopped_pipeline_leaves_its_groups_and_the_next_one_is_assigned_without_waiting(kafka,
                                                                                                  unique_prefix):
    profile = kafka.profile.model_copy(update={"session_timeout_ms": SESSION_MS})
    settings = run_settings(unique_prefix)
    stages, _ = runnable(ALL_STAGES, settings)
    groups = [settings.group(name) for name in stages]
    # the earliest an old member that did not leave can be dropped by its broker, counted from its stop
    expiry_s = (profile.session_timeout_ms - profile.heartbeat_interval_ms) / 1000
    join_s = 3 * (profile.session_timeout_ms + profile.rebalance_timeout_ms) / 1000  # group_guard's patience

    async with InProcessPipeline(settings, kafka.bootstrap, profile, stages) as run:
        await _owned_at(run, stages, join_s)
        before = await _members(kafka, groups)
    stopped_at = time.monotonic()
    after = await _members(kafka, groups)
    asked_s = time.monotonic() - stopped_at
    assert all(len(before[group]) == 1 for group in groups), before
    assert asked_s < expiry_s, f"the groups were described {asked_s:.1f} s after the stop: too late to tell"
    assert after == {group: [] for group in groups}, f"members still in their groups after the stop: {after}"

    async with InProcessPipeline(settings, kafka.bootstrap, profile, stages) as run:
        owned = await _owned_at(run, stages, join_s)
    waited = {name: round(at - stopped_at, 1) for name, at in owned.items()}
    print(f"owned partitions after the stop (s): {waited}; a member that did not leave would hold its group "
          f"{expiry_s:.0f} s")
    assert max(waited.values()) < expiry_s, waited
