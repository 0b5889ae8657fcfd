"""Two batcher replicas in one consumer group: each owns some playbooks, and every one follows the controller."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.partitioner import DefaultPartitioner

from combee_core.models import BatchMetrics
from streams.topology.follower import PlaybookFollower
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces, send_traces
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _playbooks_on_distinct_partitions(partitions: int = 2) -> tuple[str, str]:
    """Two playbook ids whose keys land on different partitions (aiokafka's default partitioner)."""
    choose = DefaultPartitioner()
    by_partition: dict[int, str] = {}
    for n in range(100):
        name = f"pb{n}"
        by_partition.setdefault(choose(name.encode(), list(range(partitions)), list(range(partitions))), name)
        if len(by_partition) == partitions:
            return by_partition[0], by_partition[1]
    raise AssertionError("no two playbook ids on distinct partitions")


async def test_every_batcher_replica_applies_the_controllers_decisions(kafka, unique_prefix):
    # the profiling objective (a new size every round); the streaming one is tested in test_overload / unit tests
    # Each round sends exactly the batch size, so batches close on size; a max_wait that elapsed while a loaded
    # machine still reflected the round closed a batch of 100 at 60 (a flake in the full suite), so it is long here.
    settings = run_settings(unique_prefix, auto_batch_size=True, controller_clock="modelled", max_wait_s=30.0,
                            controller_objective="delay")
    playbooks = _playbooks_on_distinct_partitions(settings.partitions)
    traces = {pb: make_traces(160, pb) for pb in playbooks}  # 40, then rungs 100 and 10 (profiled from the top)
    sent = {pb: 0 for pb in playbooks}
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run, \
            InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("batch",)):
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            async with PlaybookFollower(settings, kafka.bootstrap, kafka.profile,
                                        check_alive=run.check_alive) as follower:
                for round_number in range(1, 4):  # start size, then two sizes the controller chose
                    ids = set()
                    for pb in playbooks:
                        size = follower.batch_size(pb)
                        chunk = traces[pb][sent[pb]:sent[pb] + size]
                        sent[pb] += size
                        await send_traces(producer, settings, chunk)
                        ids |= {t.trace_id for t in chunk}
                    await follower.wait_incorporated(ids, 60, "a round in versions")
                    # Each profiling batch changes the size, so every round ends with one new decision per playbook.
                    await follower.wait_until(
                        lambda: all(sum(d.playbook_id == pb for d in follower.decisions) >= round_number  # noqa: B023
                                    for pb in playbooks), 20, f"decision {round_number} for both playbooks")
        finally:
            await producer.stop()
        manifests = await run.manifests()
        metrics = await read_models(run, "metrics", BatchMetrics)

    for pb in playbooks:
        # A sync round's wall time, version to version, for the controller in sync mode: none before version 1.
        rounds = [m.round_s for m in sorted((m for m in metrics if m.playbook_id == pb), key=lambda m: m.version)]
        assert rounds[0] is None and all(r is not None and r > 0 for r in rounds[1:]), rounds
        sizes = [m.n for m in manifests if m.playbook_id == pb]
        decided = [d.batch_size for d in follower.decisions if d.playbook_id == pb]
        assert decided, f"no decision for {pb}"
        # Whichever replica owns the playbook formed its batches at the sizes the controller chose.
        assert sizes[0] == settings.batch_size
        assert sizes[1:] == decided[:len(sizes) - 1], (pb, sizes, decided)
        assert all(m.closed_by == "size" for m in manifests if m.playbook_id == pb)


async def test_a_batch_that_never_becomes_a_version_is_reported_as_stalled(kafka, unique_prefix, caplog):
    """A manifest whose copies never come (written here, as a batcher that died before its copies would leave it
    with reflections nobody redelivers): the reducer warns once the batch is older than stall_warning_s."""
    from datetime import datetime, timezone

    from combee_core.models import BatchManifest
    from streams.topology.observe import collect_status, format_status

    settings = run_settings(unique_prefix, stall_warning_s=1.0)
    stuck = BatchManifest(playbook_id="pb", batch_id=0, base_version=0, trace_ids=["t-1", "t-2"],
                          reflection_ids=["r-1", "r-2"], n=2, k=1, p=2, seed=0, subgroup_sizes=[4],
                          target_batch_size=2, closed_by="size", closed_at=datetime.now(timezone.utc))
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("reduce",)) as run:
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            await producer.send_and_wait(settings.topic("batches"), stuck.to_json_bytes(), key=b"pb")
        finally:
            await producer.stop()
        async with PlaybookFollower(settings, kafka.bootstrap, kafka.profile, check_alive=run.check_alive) as f:
            await f.wait_until(lambda: "batch 0 (2 traces) closed" in caplog.text, 30, "the stall warning")
        report = format_status(await collect_status(settings, kafka.bootstrap, kafka.profile))
    assert "2 trace(s) batched, not yet in a version" in report and "STALLED?" in report


async def test_a_partial_resend_after_a_restart_is_dropped_and_never_pins_the_committed_offset(kafka, unique_prefix):
    """A client resends some traces of a batch already learned while the batcher restarts: they are duplicates (not
    a batch to re-send), the batcher commits past them, and nothing is learned twice."""
    from streams.topology.observe import collect_status

    settings = run_settings(unique_prefix, batch_size=20, max_wait_s=30.0)
    traces = make_traces(20, "pb")
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=60)
    await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[:7])  # while no batcher runs
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        deadline = asyncio.get_running_loop().time() + 60
        while True:  # the resent traces reflected (20 + 7 reflections) and the batcher's lag back to 0
            status = await collect_status(settings, kafka.bootstrap, kafka.profile)
            if status.end_offsets.get(settings.topic("reflections"), 0) >= 27 and not status.lag["batch"]:
                break
            assert asyncio.get_running_loop().time() < deadline, f"batcher offsets pinned: lag {status.lag}"
            await asyncio.sleep(1)
        versions = await run.versions("pb")
    assert [v.version for v in versions] == [1] and sorted(versions[0].lineage) == sorted(t.trace_id for t in traces)
    assert run.counters.get("duplicate_traces") == 7 and "batches_resent" not in run.counters
