"""The context lag (issue 44): batch b's aggregators read version max(0, b - lag), a rule of the batch alone (never of
timing), recorded in its manifest so replays and restarts read the same versions; with lag 1 the chain pacing lets a
batch close while the one before it is being built, so a stopped stream's trailing batch does not wait for it."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

import pytest

from combee_core.aggregate.processor import context_version
from combee_core.batch.batching import ShuffleConfig, deal_as_manifest, deal_batch
from combee_core.batch.chain_pacing import ChainPacing
from combee_core.batch.processor import Batcher, BatcherConfig
from combee_core.models import BatchManifest, Reflection, ShuffledReflection
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings, SettingsError

WALL = datetime(2026, 1, 1, tzinfo=UTC)


def _reflection(number: int) -> Reflection:
    return Reflection(reflection_id=f"r{number}", trace_id=f"t{number}", playbook_id="pb", seen_version=0,
                      insights=[], model="sim", trace_digest=f"d{number}")


def _batcher(lag: int, batch_size: int = 4, cap: int = 10) -> Batcher:
    return Batcher(BatcherConfig(shuffle=ShuffleConfig(run_seed=1, p=2, context_lag=lag), batch_size=batch_size,
                                 dedupe_horizon=10_000, max_wait_s=10.0, pacing=ChainPacing(cap, lag=lag)))


def _feed(batcher: Batcher, log: EffectLog, numbers: range, now: float = 0.0) -> None:
    for number in numbers:
        log.extend(batcher.take(_reflection(number), f"pb:{number}", now, WALL))


def _manifests(log: EffectLog) -> list[BatchManifest]:
    return [p.value for p in log.publishes("batches") if isinstance(p.value, BatchManifest)]


def _read(log: EffectLog) -> dict[int, set[int]]:
    """Batch id -> the versions its copies have the aggregators read."""
    read: dict[int, set[int]] = {}
    for publish in log.publishes("shuffle"):
        assert isinstance(publish.value, ShuffledReflection)
        read.setdefault(publish.value.batch_id, set()).add(context_version(publish.value))
    return read


def test_every_batch_but_the_first_reads_the_version_before_the_one_it_builds_and_lag_0_reads_that_one():
    reflections = [_reflection(n) for n in range(4)]
    for lag, versions in ((1, [0, 0, 1, 2, 3]), (0, [0, 1, 2, 3, 4])):
        for batch_id, version in enumerate(versions):
            batch = deal_batch("pb", batch_id, reflections, ShuffleConfig(p=2, context_lag=lag), target_batch_size=4,
                               closed_by="size", closed_at=WALL)
            assert batch.manifest.context_lag == lag and batch.manifest.base_version == batch_id
            assert {context_version(copy) for copy in batch.copies} == {version}, (lag, batch_id)


def test_the_default_lag_is_1_set_by_combee_context_lag_and_a_lag_above_1_is_refused_in_one_line():
    """Lag 1 is the default since the controller costs overlapping versions (combee_core/control/chain_costs.py)."""
    assert CombeeSettings.load(env={}).context_lag == 1
    assert BatcherConfig.from_settings(CombeeSettings.load(env={})).shuffle.context_lag == 1
    assert BatcherConfig.from_settings(CombeeSettings.load(env={"COMBEE_CONTEXT_LAG": "0"})).shuffle.context_lag == 0
    with pytest.raises(SettingsError, match="COMBEE_CONTEXT_LAG"):
        CombeeSettings.load(env={"COMBEE_CONTEXT_LAG": "2"})


def test_a_manifest_recorded_before_the_lag_existed_replays_with_lag_0_and_a_recorded_lag_is_kept():
    batch = deal_batch("pb", 2, [_reflection(n) for n in range(4)], ShuffleConfig(p=2, context_lag=1),
                       target_batch_size=4, closed_by="size", closed_at=WALL)
    old = batch.manifest.model_dump(mode="json")
    del old["context_lag"]
    assert BatchManifest.model_validate(old).context_lag == 0
    reflections = {r.trace_id: r for r in (_reflection(n) for n in range(4))}
    again = deal_as_manifest(batch.manifest, reflections, ShuffleConfig(p=2, context_lag=0), WALL)
    assert again.copies == batch.copies  # a restart's re-send under another setting: the same copies


def test_with_lag_1_a_due_batch_closes_while_the_one_before_is_built_on_a_version_that_exists():
    for lag, closed_at_once in ((1, [4, 4]), (0, [4])):
        batcher, log = _batcher(lag), EffectLog()
        _feed(batcher, log, range(4))  # batch 0, the chain free
        _feed(batcher, log, range(4, 8), now=1.0)  # due while batch 0 is built
        assert [m.n for m in _manifests(log)] == closed_at_once, lag
    batcher, log = _batcher(1), EffectLog()
    _feed(batcher, log, range(8))
    _feed(batcher, log, range(8, 11), now=1.0)  # batches 0 and 1 pending: held (its context, version 1, is not out)
    log.extend(batcher.tick(2.0, WALL))
    assert [m.n for m in _manifests(log)] == [4, 4]
    batcher.take_version("pb", 0)  # version 1: batch 2 can be aggregated on it while batch 1 is reduced
    log.extend(batcher.tick(2.1, WALL))
    assert [m.n for m in _manifests(log)] == [4, 4, 3]
    assert _read(log) == {0: {0}, 1: {0}, 2: {1}}


def test_with_lag_1_a_stopped_streams_trailing_batch_closes_while_the_version_before_it_is_built():
    """Issue 44: the drain after a stream stops is the rest of the version being built plus the trailing batch's
    reduce (its aggregation overlaps that rest), not plus a whole cycle."""
    for lag in (1, 0):
        batcher = Batcher(BatcherConfig(shuffle=ShuffleConfig(run_seed=1, p=2, context_lag=lag), batch_size=40,
                                        dedupe_horizon=10_000, max_wait_s=10.0, pacing=ChainPacing(160, lag=lag)))
        log = EffectLog()
        for number in range(40):  # batch 0 closes at the target (the chain is free)
            log.extend(batcher.take(_reflection(number), f"pb:{number}", number * 0.05, WALL))
        for number in range(40, 52):  # 12 more while batch 0 is built, then the stream stops
            log.extend(batcher.take(_reflection(number), f"pb:{number}", number * 0.05, WALL))
        log.extend(effect for effects in batcher.close_due(2.6 + 0.6, WALL, drained=["pb"]) for effect in effects)
        if lag == 0:  # the trailing batch waits for version 1
            assert [m.n for m in _manifests(log)] == [40]
            continue
        assert [(m.batch_id, m.n, m.base_version, m.context_lag) for m in _manifests(log)] == \
            [(0, 40, 0, 1), (1, 12, 1, 1)]
        assert _read(log) == {0: {0}, 1: {0}}  # batch 1 is applied to version 1, read on version 0
        assert sorted(log.acknowledged()) == sorted(f"pb:{n}" for n in range(52))


Record = namedtuple("Record", "value offset")


def test_the_playbook_views_checkpoint_keeps_the_version_before_the_newest_for_the_aggregators():
    """A restarted aggregator reads the checkpoint's versions: with lag 1 it needs the one before the newest."""
    from streams.topology.playbook_view import PlaybookVersions

    view = PlaybookVersions(stage=None)  # type: ignore[arg-type]  # the stage is used only by start()
    for version in (1, 2, 3):
        view._take("pb", version, Record(b'{"playbook_id": "pb", "version": %d}' % version, 10 + version))
    assert view._state.latest == {"pb": 13, "pb~": 12}
    restarted = PlaybookVersions(stage=None)  # type: ignore[arg-type]
    for offset in view._state.latest.values():  # a restart loads them in the checkpoint's order
        version = offset - 10
        restarted._take("pb", version, Record(b'{"playbook_id": "pb", "version": %d}' % version, offset))
    assert restarted.latest_version("pb") == 3 and restarted._state.latest == view._state.latest
    assert set(restarted._raw["pb"]) == {2, 3}
