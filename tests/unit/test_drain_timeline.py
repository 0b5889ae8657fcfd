"""bench.drain_timeline: a version's time from its batch's close to the version splits into the wait for the
previous version, the hand-off, the aggregation and the reduce, read from the topics' times."""

from datetime import UTC, datetime, timedelta

import pytest

from bench.drain_timeline import summarise_drain, version_times
from combee_core.models import BatchManifest, PartialUpdate, PlaybookVersion, VersionStats

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def manifest(batch_id: int, closed_s: float) -> BatchManifest:
    ids = [f"t{batch_id}-{i}" for i in range(4)]
    return BatchManifest(playbook_id="pb", batch_id=batch_id, base_version=batch_id, trace_ids=ids,
                         reflection_ids=[f"r{t}" for t in ids], n=4, k=2, p=2, seed=0, subgroup_sizes=[2, 2],
                         target_batch_size=4, closed_by="size", closed_at=at(closed_s))


def partial(batch_id: int, latency_s: float) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=batch_id, node=0, k=2, base_version=batch_id, operations=[],
                         items_read=4, expected_items=4, batch_closed_at=T0, latency_s=latency_s)


def version(batch_id: int, published_s: float) -> PlaybookVersion:
    return PlaybookVersion(playbook_id="pb", version=batch_id + 1, parent_version=batch_id, batch_id=batch_id,
                           entries=[], next_entry_number=1, operations=[], lineage=[],
                           stats=VersionStats(batch_size=4, k=2, p=1), content_hash=f"{batch_id:064x}",
                           published_at=at(published_s))


def test_the_last_version_s_time_splits_into_wait_hand_off_aggregate_and_reduce() -> None:
    """Batch 0 closes at 0 and is out at 5; batch 1 closes at 2 (its last reflection at 1.5), waits for version 1
    until 5, its calls run 5.1-8.6 and 5.3-9.0, its version is out at 9.1. The stream ended at 0.5."""
    versions = [version(0, 5.0), version(1, 9.1)]
    manifests = [manifest(0, 0.0), manifest(1, 2.0)]
    reflected = {"rt1-3": T0.timestamp() + 1.5, "rt0-0": T0.timestamp() - 1}
    shuffled = {("pb", 1): T0.timestamp() + 2.05}
    partials = [(partial(0, 4.0), T0.timestamp() + 4.9), (partial(1, 3.5), T0.timestamp() + 8.6),
                (partial(1, 3.7), T0.timestamp() + 9.0)]
    times = version_times(versions, manifests, reflected, shuffled, partials)
    assert [t.version for t in times] == [1, 2]
    parts = times[1].parts()
    assert parts["wait"] == pytest.approx(3.0) and parts["hand_off"] == pytest.approx(0.1)
    assert parts["aggregate"] == pytest.approx(3.9) and parts["reduce"] == pytest.approx(0.1)
    assert parts["longest_call"] == pytest.approx(3.7)
    closed_to_version = times[1].published - times[1].closed
    assert sum(parts[p] for p in ("wait", "hand_off", "aggregate", "reduce")) == pytest.approx(closed_to_version)
    summary = summarise_drain(times, stream_end=T0.timestamp() + 0.5)
    assert summary["drain_timeline"]["last_reflection"] == pytest.approx(1.0)
    assert summary["drain_timeline"]["previous_closed"] == pytest.approx(-0.5)
    assert summary["drain_timeline"]["previous_out"] == pytest.approx(4.5)
    assert summary["drain_timeline"]["published"] == pytest.approx(8.6)
    assert summary["last_batch_closed_by"] == "size" and summary["steady_parts"]["wait"] == 0.0
