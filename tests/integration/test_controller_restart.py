"""A restarted controller starts from its checkpoints, not the whole ``metrics`` and ``control`` logs, and keeps its
decisions (``streams/topology/stages/control.py``).

The streaming controller is pinned to batches of 2 (``controller_bs_min`` = ``controller_bs_max`` = 2) while the
batcher starts at 3: its first choice is one decision (id 0), and no later one, as long as it knows that decision.
After over 64 versions (the metrics a decision rests on) the worker is stopped and started again; it must say it
resumed both logs from a checkpoint (the metrics log past its start), and ``control`` must still hold exactly one
decision: a controller that had lost it would publish 2 again, as decision 0 again."""

from __future__ import annotations

import re

import pytest

from combee_core.models import ControlDecision
from combee_core.topology import Topic
from streams.testing.worker_fleet import WorkerFleet, feed, fleet_settings, wait_accounted
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = "restarts"
BEFORE, AFTER = 180, 20
PINNED = {"COMBEE_AUTO_BATCH_SIZE": "true", "COMBEE_FLEET_MODE": "async", "COMBEE_CONTROLLER_OBJECTIVE": "stream",
          "COMBEE_CONTROLLER_BS_MIN": "2", "COMBEE_CONTROLLER_BS_MAX": "2", "COMBEE_BATCH_SIZE": "3",
          "COMBEE_MAX_WAIT_S": "1", "COMBEE_VIEW_CHECKPOINT_EVERY": "10", "COMBEE_SIM_TIME_SCALE": "0.05"}


async def test_a_restarted_controller_resumes_from_its_checkpoints_and_keeps_its_decision(kafka, unique_prefix,
                                                                                         tmp_path):
    settings = fleet_settings(unique_prefix)
    traces = make_traces(BEFORE + AFTER, PLAYBOOK, seed=11)
    fleet = WorkerFleet(kafka, unique_prefix, tmp_path, extra_env=PINNED)
    try:
        fleet.start(0)
        await fleet.wait_ready(0)
        await feed(settings, kafka, traces[:BEFORE], 20.0)
        audit = await wait_accounted(settings, kafka, fleet, {t.trace_id for t in traces[:BEFORE]}, 600)
        assert not audit.problems(), f"{audit}\n{fleet.tail()}"
        fleet.terminate(0)
        fleet.start(0)
        await fleet.wait_ready(0)
        await feed(settings, kafka, traces[BEFORE:], 20.0)
        audit = await wait_accounted(settings, kafka, fleet, {t.trace_id for t in traces}, 300)
        restarted = fleet.log_text(0)
    finally:
        fleet.stop_all()
    assert not audit.problems(), f"{audit}\n{fleet.tail()}"
    resumed = dict(re.findall(r"(control/\w+): resumed from its checkpoint at offset (\d+)", restarted))
    assert set(resumed) == {"control/control", "control/metrics"}, restarted[-3000:]
    assert int(resumed["control/metrics"]) > 0  # more than the last 64 metrics were on the log: it skipped some
    decisions = [ControlDecision.from_json_bytes(r.value)
                 for r in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.CONTROL))]
    ours = [(d.decision_id, d.batch_size) for d in decisions if d.playbook_id == PLAYBOOK]
    assert ours == [(0, 2)], ours
