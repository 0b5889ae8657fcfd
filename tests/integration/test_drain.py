"""A stream that stops: its last batch closes at the stream's own pace once the reflector has said no trace is left
to reflect (docs/architecture.md, "Batching"), not ``batch_idle_s`` after its last reflection.

``batch_idle_s`` is made long (30 s) and the batch size and ``max_wait_s`` too large to close anything, so a batch
that closes within half of ``batch_idle_s`` of its last reflection can only have been closed on the reflector's
word (the ``combee-upstream-drained`` header on the last reflection it published)."""

from __future__ import annotations

import pytest

from combee_core.batch.batching import UPSTREAM_DRAINED
from combee_core.models import Reflection
from combee_core.topology import Topic
from streams.testing.worker_fleet import WorkerFleet, feed, fleet_settings, read_run, wait_accounted
from streams.topology.topic_reader import read_topic
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = "drains"
TRACES = 60
RATE_PER_S = 20.0
IDLE_S = 30.0
QUIET = {"COMBEE_BATCH_SIZE": "1000", "COMBEE_MAX_WAIT_S": "120", "COMBEE_BATCH_IDLE_S": str(IDLE_S)}


async def test_the_last_batch_of_a_stopped_stream_closes_without_waiting_batch_idle_s(kafka, unique_prefix, tmp_path):
    settings = fleet_settings(unique_prefix)
    traces = make_traces(TRACES, PLAYBOOK, seed=5)
    fleet = WorkerFleet(kafka, unique_prefix, tmp_path, extra_env=QUIET)
    try:
        fleet.start(0)
        await fleet.wait_ready(0)
        await feed(settings, kafka, traces, RATE_PER_S)
        audit = await wait_accounted(settings, kafka, fleet, {t.trace_id for t in traces}, 4 * IDLE_S)
    finally:
        fleet.stop_all()
    assert not audit.problems(), f"{audit}\n{fleet.tail()}"
    assert audit.learned == TRACES
    _, manifests, _ = await read_run(settings, kafka)
    last = max((m for m in manifests if m.playbook_id == PLAYBOOK), key=lambda m: m.batch_id)
    assert last.closed_by == "idle"
    records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.REFLECTIONS))
    ours = [(r, Reflection.from_json_bytes(r.value)) for r in records]
    ours = [(r, reflection) for r, reflection in ours if reflection.playbook_id == PLAYBOOK]
    last_record = max(ours, key=lambda pair: pair[0].offset)[0]
    assert any(key == UPSTREAM_DRAINED for key, _ in last_record.headers)  # the reflector's word
    waited = last.closed_at.timestamp() - last_record.timestamp / 1000
    assert 0 <= waited < IDLE_S / 2, f"the last batch closed {waited:.1f} s after its last reflection"
