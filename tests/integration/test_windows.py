"""Aggregator windows and the reducer on a real broker: a missing copy, redelivered copies and partials."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from aiokafka import AIOKafkaProducer

from combee_core.batch.batching import ShuffleConfig, deal_batch
from combee_core.models import Insight, PartialUpdate, Reflection
from streams.topology.kafka_clients import producer_config
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.worker import ensure_topics
from tests.integration.topology_support import assert_contiguous, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _reflections(n: int) -> list[Reflection]:
    return [
        Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, model="test",
                   insights=[Insight(section="tools", content=f"LESSON[tools]: For rule R{i:02d}, check input {i}.")])
        for i in range(n)
    ]


async def test_a_missing_copy_closes_its_window_by_timeout_and_redeliveries_change_nothing(kafka, unique_prefix):
    settings = run_settings(unique_prefix, window_timeout_s=2.0)
    batch = deal_batch("pb", 0, _reflections(16), ShuffleConfig(run_seed=0, p=2, max_fan_in=32),
                       target_batch_size=16, closed_by="size", closed_at=datetime.now(timezone.utc))
    assert batch.manifest.k == 4
    missing = batch.copies[0]
    sent = list(batch.copies[1:]) + list(batch.copies[1:6])  # one copy never sent, five sent twice
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("aggregate", "reduce")) as run:
        producer = AIOKafkaProducer(**producer_config(kafka.bootstrap, kafka.profile))
        await producer.start()
        try:
            for copy in sent:
                await producer.send(settings.topic("shuffle"), copy.to_json_bytes(),
                                    key=f"pb/0/{copy.subgroup}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        versions = await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=30)
        partials = await read_models(run, "partials", PartialUpdate)
    assert_contiguous(versions, "pb", 1)
    assert sorted(p.node for p in partials) == [0, 1, 2, 3]  # one partial per window, redeliveries ignored
    short = next(p for p in partials if p.node == missing.subgroup)
    assert (short.closed_by, short.missing_items, short.items_read) == ("timeout", 1, missing.expected_count - 1)
    assert all(p.closed_by == "complete" and p.missing_items == 0 for p in partials if p is not short)
    # The missing copy's reflection still reached the playbook through its other copy.
    assert versions[0].lineage == sorted(f"t{i}" for i in range(16))
    assert run.counters.get("duplicate_copies", 0) == 5


async def test_a_batch_whose_copies_were_cut_off_by_a_crash_is_completed_after_restart(kafka, unique_prefix):
    """The state a crash between manifest and copies leaves: manifest published, 3 copies out, reflections
    uncommitted."""
    settings = run_settings(unique_prefix, batch_size=16)
    reflections = _reflections(16)
    batch = deal_batch("pb", 0, reflections, ShuffleConfig(run_seed=settings.run_seed, p=2, max_fan_in=32),
                       target_batch_size=16, closed_by="size", closed_at=datetime.now(timezone.utc))
    producer = AIOKafkaProducer(**producer_config(kafka.bootstrap, kafka.profile))
    await producer.start()
    try:
        await ensure_topics(settings, kafka.bootstrap)
        for reflection in reflections:
            await producer.send(settings.topic("reflections"), reflection.to_json_bytes(), key=b"pb")
        await producer.send(settings.topic("batches"), batch.manifest.to_json_bytes(), key=b"pb")
        for copy in batch.copies[:3]:
            await producer.send(settings.topic("shuffle"), copy.to_json_bytes(), key=f"pb/0/{copy.subgroup}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile,
                                 stages=("batch", "aggregate", "reduce")) as run:
        versions = await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=30)
        partials = await read_models(run, "partials", PartialUpdate)
        manifests = await run.manifests()
    assert_contiguous(versions, "pb", 1)
    assert versions[0].lineage == sorted(r.trace_id for r in reflections)
    assert all(p.closed_by == "complete" for p in partials) and len(partials) == batch.manifest.k
    assert len(manifests) == 1  # the batch was re-sent, not re-formed
    assert run.counters.get("batches_resent") == 1 and run.counters.get("duplicate_copies") == 3
