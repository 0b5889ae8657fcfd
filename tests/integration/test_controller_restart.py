"""A restarted controller starts from its checkpoints, not the whole ``metrics`` and ``control`` logs, and keeps its
decisions (``streams/topology/stages/control.py``).

The streaming controller is pinned to batches of 2 (``controller_bs_min`` = ``controller_bs_max`` = 2) while the
batcher starts at 3: its first choice is one decision (id 0), and no later one, as long as it knows that decision.
The traces stream in faster than versions come out; as soon as the controller has checkpointed the metrics log past
its start (over 64 versions: the metrics a decision rests on) the worker is stopped, with traces still in flight,
and started again; it must say it resumed both logs from a checkpoint (the metrics log past its start), every trace
must end in one version, and ``control`` must still hold exactly one decision: a controller that had lost it would
publish 2 again, as decision 0 again."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from combee_core.log_order import valid_versions
from combee_core.models import ControlDecision, PlaybookVersion, ViewCheckpoint
from combee_core.topology import Topic
from streams.testing.worker_fleet import WorkerFleet, feed, fleet_settings, read_run, wait_accounted
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = "restarts"
TRACES = 170
"""~80 versions: the metrics log is checkpointed past its start from the 70th metric on (every 10; a decision rests on
the last 64), so the restart comes with ~10 versions' traces (~20) still to learn, sent and not yet in a version."""
PINNED = {"COMBEE_AUTO_BATCH_SIZE": "true", "COMBEE_FLEET_MODE": "async", "COMBEE_CONTROLLER_OBJECTIVE": "stream",
          "COMBEE_CONTROLLER_BS_MIN": "2", "COMBEE_CONTROLLER_BS_MAX": "2", "COMBEE_BATCH_SIZE": "3",
          "COMBEE_MAX_WAIT_S": "1", "COMBEE_VIEW_CHECKPOINT_EVERY": "10", "COMBEE_SIM_TIME_SCALE": "0.05",
          "COMBEE_GUARD": "0"}  # the live-trace guard has nothing to judge here (every trace ran v0): one stage less


async def test_a_restarted_controller_resumes_from_its_checkpoints_and_keeps_its_decision(kafka, unique_prefix,
                                                                                         tmp_path):
    settings = fleet_settings(unique_prefix)
    traces = make_traces(TRACES, PLAYBOOK, seed=11)
    fleet = WorkerFleet(kafka, unique_prefix, tmp_path, extra_env=PINNED)
    try:
        fleet.start(0)
        await fleet.wait_ready(0)
        await feed(settings, kafka, traces, 50.0)  # all sent in ~3.4 s, long before the 70th version
        position = await _metrics_checkpointed_past_the_start(settings, kafka, fleet, 600)
        in_flight = await _not_in_a_version(settings, kafka, traces)
        fleet.terminate(0)
        assert in_flight, "every trace was in a version before the restart: nothing was in flight"
        fleet.start(0)
        await fleet.wait_ready(0)
        audit = await wait_accounted(settings, kafka, fleet, {t.trace_id for t in traces}, 300)
        restarted = fleet.log_text(0)
    finally:
        fleet.stop_all()
    print(f"stopped at the metrics checkpoint at offset {position}, {in_flight} of {TRACES} traces in no version yet")
    assert not audit.problems(), f"{audit}\n{fleet.tail()}"
    resumed = dict(re.findall(r"(control/\w+): resumed from its checkpoint at offset (\d+)", restarted))
    assert set(resumed) == {"control/control", "control/metrics"}, restarted[-3000:]
    assert int(resumed["control/metrics"]) >= position > 0  # over 64 metrics were on the log: it skipped some
    decisions = [ControlDecision.from_json_bytes(r.value)
                 for r in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.CONTROL))]
    ours = [(d.decision_id, d.batch_size) for d in decisions if d.playbook_id == PLAYBOOK]
    assert ours == [(0, 2)], ours


async def _metrics_checkpointed_past_the_start(settings, kafka, fleet: WorkerFleet, timeout_s: float) -> int:
    """The position of the first ``control/metrics`` checkpoint past the start of the log, once there is one."""
    deadline = time.monotonic() + timeout_s
    while True:
        fleet.check_alive()
        for record in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.CHECKPOINTS)):
            checkpoint = ViewCheckpoint.from_json_bytes(record.value)
            if checkpoint.view == "control/metrics" and checkpoint.position > 0:
                return checkpoint.position
        assert time.monotonic() < deadline, f"no control/metrics checkpoint past 0 after {timeout_s:.0f} s"
        await asyncio.sleep(1.0)


async def _not_in_a_version(settings, kafka, traces) -> int:
    """How many of ``traces`` are in no version yet."""
    versions: list[PlaybookVersion] = (await read_run(settings, kafka))[0]
    learned = {t for v in valid_versions(versions) for t in v.lineage}
    return sum(t.trace_id not in learned for t in traces)
