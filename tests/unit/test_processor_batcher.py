"""The batcher's decisions, driven without a broker: inputs in, effects out (``combee_core.batch.processor``)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.batch.batching import ShuffleConfig
from combee_core.batch.processor import Batcher, BatcherConfig
from combee_core.models import BatchManifest, ControlDecision, Reflection, ShuffledReflection
from combee_core.processors.effects import Acknowledge, Effect, Publish, Reject
from combee_core.processors.testing import EffectLog

WALL = datetime(2026, 1, 1, tzinfo=UTC)


def _config(**overrides: object) -> BatcherConfig:
    values: dict = dict(shuffle=ShuffleConfig(run_seed=1, p=2), batch_size=4, dedupe_horizon=1000, max_wait_s=5.0)
    values.update(overrides)
    return BatcherConfig(**values)


def _reflection(number: int, playbook_id: str = "pb", *, seen: int = 0, digest: str = "d") -> Reflection:
    return Reflection(reflection_id=f"r{number}", trace_id=f"t{number}", playbook_id=playbook_id, seen_version=seen,
                      insights=[], model="sim", trace_digest=f"{digest}{number}")


def _feed(batcher: Batcher, log: EffectLog, numbers: range, playbook_id: str = "pb", now: float = 0.0) -> None:
    for number in numbers:
        log.extend(batcher.take(_reflection(number, playbook_id), f"{playbook_id}:{number}", now, WALL))


def test_a_batch_closes_at_its_size_manifest_first_then_p_copies_each_then_its_reflections_are_acknowledged():
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(3))
    assert log.effects == []  # an open batch publishes nothing and acknowledges nothing
    _feed(batcher, log, range(3, 4))
    first, *rest = log.effects
    assert isinstance(first, Publish) and first.topic == "batches" and first.number == ("pb", 0)
    manifest = first.value
    assert isinstance(manifest, BatchManifest) and manifest.trace_ids == ["t0", "t1", "t2", "t3"]
    copies = log.publishes("shuffle")
    assert len(copies) == 8 and rest[: len(copies)] == copies  # the copies come right after the manifest
    for publish in copies:
        copy = publish.value
        assert isinstance(copy, ShuffledReflection)
        assert publish.key == f"pb/0/{copy.subgroup}"
    assert isinstance(log.effects[-1], Acknowledge) and log.acknowledged() == ["pb:0", "pb:1", "pb:2", "pb:3"]
    assert log.counts() == {"batches": 1, "shuffled_copies": 8}

    _feed(batcher, log, range(4, 8))
    assert [p.number for p in log.publishes("batches")] == [("pb", 0), ("pb", 1)]
    assert log.settled() == {f"pb:{n}": 1 for n in range(8)}


def test_playbooks_are_batched_apart_and_max_wait_closes_a_batch_that_has_at_least_one_reflection():
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(2), "alpha", now=10.0)
    _feed(batcher, log, range(2, 3), "beta", now=12.0)
    assert log.extend(batcher.tick(14.9, WALL)) == []
    closed = log.extend(batcher.tick(15.0, WALL))
    [manifest] = [e.value for e in closed if isinstance(e, Publish) and e.topic == "batches"]
    assert isinstance(manifest, BatchManifest)
    assert (manifest.playbook_id, manifest.closed_by, manifest.n) == ("alpha", "max_wait", 2)
    assert log.acknowledged() == ["alpha:0", "alpha:1"]
    log.extend(batcher.tick(17.0, WALL))
    assert log.acknowledged()[2:] == ["beta:2"]


def test_a_resent_trace_is_acknowledged_as_a_duplicate_and_a_different_trace_under_its_id_is_a_dead_letter():
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(4))
    again = log.extend(batcher.take(_reflection(2), "again", 1.0, WALL))
    assert log.counts()["duplicate_traces"] == 1 and again[-1] == Acknowledge(("again",))
    [rejected] = log.extend(batcher.take(_reflection(2, digest="other"), "conflict", 1.0, WALL))
    assert isinstance(rejected, Reject) and rejected.error_type == "ConflictingTrace"
    assert rejected.token == "conflict" and (rejected.trace_id, rejected.playbook_id) == ("t2", "pb")
    assert "digest other2" in rejected.reason and "digest d2" in rejected.reason


def test_a_reflection_more_than_max_staleness_versions_behind_is_a_dead_letter():
    batcher, log = Batcher(_config(max_staleness=1, batch_size=1)), EffectLog()
    _feed(batcher, log, range(2))  # batches 0 and 1: the next batch applies to version 2
    assert log.extend(batcher.take(_reflection(5, seen=1), "fresh", 0.0, WALL))[0].topic == "batches"
    [stale] = log.extend(batcher.take(_reflection(6, seen=0), "stale", 0.0, WALL))
    assert isinstance(stale, Reject) and stale.error_type == "StaleTrace"
    assert stale.reason == "stale: trace ran with version 0, 3 versions behind (max_staleness=1)"


def test_a_restored_batch_whose_reflections_all_come_back_is_re_sent_with_the_same_copies():
    original, first = Batcher(_config()), EffectLog()
    _feed(original, first, range(4))
    manifest = first.published("batches")[0]
    assert isinstance(manifest, BatchManifest)

    restarted, log = Batcher(_config()), EffectLog()
    restarted.restore(manifest)
    restarted.rearm("pb")
    _feed(restarted, log, range(3))
    assert log.effects == []  # held until the whole batch is back
    _feed(restarted, log, range(3, 4))
    assert log.publishes("batches") == []  # the manifest is on the log already: only the copies again
    assert log.published("shuffle") == first.published("shuffle")
    assert log.acknowledged() == ["pb:0", "pb:1", "pb:2", "pb:3"] and log.counts()["batches_resent"] == 1


def test_reflections_held_for_a_re_send_are_released_once_the_partition_is_read_past_its_end():
    batcher, first = Batcher(_config()), EffectLog()
    _feed(batcher, first, range(4))
    restarted, log = Batcher(_config()), EffectLog()
    restarted.restore(first.published("batches")[0])  # type: ignore[arg-type]
    restarted.rearm("pb")
    _feed(restarted, log, range(2))  # a client's partial resend, not a redelivery
    log.extend(restarted.confirm("pb"))
    assert log.acknowledged() == ["pb:0", "pb:1"] and log.counts()["duplicate_traces"] == 2
    assert log.published() == []


def test_a_revoked_playbook_drops_its_open_batch_and_its_reflections_are_not_acknowledged():
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(3))
    batcher.release("pb")
    _feed(batcher, log, range(3, 7))  # redelivered elsewhere; here a fresh batch of the next four
    manifest = log.published("batches")[0]
    assert isinstance(manifest, BatchManifest) and manifest.trace_ids == ["t3", "t4", "t5", "t6"]
    assert log.acknowledged() == ["pb:3", "pb:4", "pb:5", "pb:6"]


def test_a_controller_decision_sets_the_batch_size_once_per_id():
    batcher, log = Batcher(_config()), EffectLog()
    decision = ControlDecision(playbook_id="pb", decision_id=0, batch_size=2, phase="profiling", tau=0.1,
                               reason="profile", decided_at=WALL)
    assert batcher.take_decision(decision) and not batcher.take_decision(decision.model_copy(update={"batch_size": 9}))
    _feed(batcher, log, range(2))
    assert len(log.published("batches")) == 1


def test_a_batch_plan_releases_recorded_batches_in_order_and_rejects_traces_it_does_not_list():
    recorded, first = Batcher(_config()), EffectLog()
    _feed(recorded, first, range(8))
    plan = [m for m in first.published("batches") if isinstance(m, BatchManifest)]
    replaying, log = Batcher(_config(plan_name="old.batches"), plan), EffectLog()
    for number in [5, 4, 7, 6]:  # batch 1's reflections first: nothing is released before batch 0
        log.extend(replaying.take(_reflection(number), f"pb:{number}", 0.0, WALL))
    assert log.effects == []
    [unplanned] = log.extend(replaying.take(_reflection(99), "pb:99", 0.0, WALL))
    assert isinstance(unplanned, Reject) and unplanned.error_type == "UnplannedTrace"
    assert "(old.batches)" in unplanned.reason
    _feed(replaying, log, range(4))  # reflection 3 completes batches 0 and 1: batch 0 closes now, batch 1 apart
    assert [m.batch_id for m in log.published("batches")] == [0]  # type: ignore[attr-defined]
    groups = replaying.close_due(0.0, WALL)
    assert [[e.value.batch_id for e in g if isinstance(e, Publish) and e.topic == "batches"] for g in groups] == [[1]]
    log.extend(effect for group in groups for effect in group)
    assert [m.trace_ids for m in log.published("batches")] == [m.trace_ids for m in plan]  # type: ignore[attr-defined]
    assert log.published("shuffle") == first.published("shuffle")
    assert sorted(log.acknowledged()) == sorted(f"pb:{n}" for n in range(8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alpha", "beta"]), st.integers(0, 12), st.integers(0, 1),
                          st.floats(0.0, 3.0)), max_size=60))
def test_every_reflection_settles_exactly_once_and_every_trace_is_in_exactly_one_batch(arrivals):
    """Whatever the arrivals (resends, conflicting resends, two playbooks, time passing): each input is acknowledged
    or dead-lettered exactly once, batch ids run 0, 1, 2, ... per playbook, and each trace learned is in one batch."""
    batcher, log = Batcher(_config(batch_size=3)), EffectLog()
    now = 0.0
    first_digest: dict[tuple[str, int], int] = {}
    for token, (playbook_id, number, variant, wait) in enumerate(arrivals):
        now += wait
        log.extend(batcher.tick(now, WALL))
        first_digest.setdefault((playbook_id, number), variant)
        log.extend(batcher.take(_reflection(number, playbook_id, digest=f"v{variant}"), token, now, WALL))
    log.extend(batcher.tick(now + 10.0, WALL))  # max_wait closes what is left

    assert log.settled() == {token: 1 for token in range(len(arrivals))}
    manifests = [m for m in log.published("batches") if isinstance(m, BatchManifest)]
    for playbook_id in ("alpha", "beta"):
        mine = [m for m in manifests if m.playbook_id == playbook_id]
        assert [m.batch_id for m in mine] == list(range(len(mine)))
        batched = [t for m in mine for t in m.trace_ids]
        assert sorted(batched) == sorted({f"t{n}" for pb, n in first_digest if pb == playbook_id})
    conflicts = [r for r in log.rejected() if r.error_type == "ConflictingTrace"]
    for rejected in conflicts:  # the trace batched first is the one learned
        assert rejected.playbook_id is not None and rejected.trace_id is not None
        number = int(rejected.trace_id[1:])
        learned = f"v{first_digest[(rejected.playbook_id, number)]}{number}"
        assert f"batched first under this id (digest {learned})" in rejected.reason


def test_a_foreign_manifest_drops_the_open_batch_and_every_stale_playbook_is_rebuilt_from_the_log_once():
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(4))  # batch 0 closed: its manifest
    [manifest] = log.published("batches")
    _feed(batcher, log, range(4, 6))  # an open batch of two
    batcher.foreign_write("pb")
    batcher.lost_write("other")
    assert batcher.stale == {"pb", "other"}
    _feed(batcher, log, range(6, 8))  # the dropped reflections do not close a batch with these two
    assert len(log.published("batches")) == 1
    assert isinstance(manifest, BatchManifest)
    foreign = manifest.model_copy(update={"batch_id": 1, "trace_ids": ["t90", "t91", "t92", "t93"]})
    batcher.rebuild_stale([manifest, foreign], assigned=["pb", "other"])
    assert batcher.stale == set()
    assert batcher.accumulator.is_duplicate(_reflection(90))  # the state is the log's: the foreign batch counts
    assert not batcher.accumulator.is_duplicate(_reflection(4))  # dropped from the open batch: batched again later


def _unbatched_acknowledgements(log: EffectLog) -> list[object]:
    """Tokens acknowledged without their trace in a published manifest and without being counted a duplicate."""
    batched = {t for m in log.published("batches") if isinstance(m, BatchManifest) for t in m.trace_ids}
    return [token for token in log.acknowledged() if f"t{str(token).split(':')[1]}" not in batched]


def test_a_stale_playbook_whose_partition_stays_owned_is_not_rebuilt_under_its_open_batch():
    """The interleaving: a write of ``pb`` lost (its partition's reset is still to come) and more of its reflections
    taken into an open batch, then another partition's assignment rebuilds the stale playbooks. Rebuilt now, ``pb``
    would forget the open batch while keeping its records, and the next close would acknowledge them unbatched."""
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(4))
    [first] = log.published("batches")
    assert isinstance(first, BatchManifest)
    batcher.restore(first)  # the live view applies it
    batcher.lost_write("pb")
    _feed(batcher, log, range(4, 7))  # its partition is still owned: an open batch of three
    batcher.rebuild_stale([first], assigned=["other"])
    _feed(batcher, log, range(7, 8))
    log.extend(batcher.tick(100.0, WALL))
    assert _unbatched_acknowledgements(log) == []
    assert [m.trace_ids for m in log.published("batches")][1:] == [["t4", "t5", "t6", "t7"]]  # type: ignore[union-attr]
    assert batcher.stale == {"pb"}  # rebuilt when its partition's reset assigns it


def test_a_rebuild_drops_the_open_batch_without_acknowledging_it_and_keeps_what_the_view_applied_since():
    """Rebuilt when its partition is assigned again: the open batch's reflections come back from the committed
    offset, so they are dropped (never acknowledged); a manifest the live view applied after the log was read for
    the rebuild still counts (its batch id is not dealt again)."""
    batcher, log = Batcher(_config()), EffectLog()
    _feed(batcher, log, range(8))  # batches 0 and 1
    first, second = log.published("batches")
    assert isinstance(first, BatchManifest) and isinstance(second, BatchManifest)
    batcher.restore(first)
    batcher.restore(second)  # applied by the view after the rebuild's read of the log
    batcher.lost_write("pb")
    _feed(batcher, log, range(8, 10))
    batcher.rebuild_stale([first], assigned=["pb"])
    assert batcher.stale == set() and batcher.accumulator.open_count("pb") == 0
    assert batcher.accumulator.next_base_version("pb") == 2
    log.extend(batcher.tick(100.0, WALL))
    assert log.acknowledged() == [f"pb:{n}" for n in range(8)]  # pb:8, pb:9 come back, redelivered
    _feed(batcher, log, range(8, 12))
    assert [(m.batch_id, m.trace_ids) for m in log.published("batches")][2:] == [  # type: ignore[union-attr]
        (2, ["t8", "t9", "t10", "t11"])]


def _write_only_manifests(effect_lists: list[list[Effect]]) -> list[BatchManifest]:
    """Perform effect lists as the stage does when its partition is revoked during a manifest's write: the manifest
    is written (and counts), its copies and acknowledgements are skipped (``streams.topology.effects.perform``)."""
    written = []
    for effects in effect_lists:
        for effect in effects:
            if isinstance(effect, Publish) and effect.number is not None:
                assert isinstance(effect.value, BatchManifest)
                written.append(effect.value)
                break
    return written


def test_batches_closing_in_one_tick_are_performed_apart_so_a_revoked_write_skips_no_other_manifest():
    """The interleaving of a lost playbook (alpha and beta share a partition): both batches expire in one tick, and
    the partition is revoked while alpha's manifest is written. Performed as one list, beta's manifest was skipped
    while this state had taken beta's batch id and traces: back on the partition, their redelivered reflections were
    acknowledged as duplicates of a batch no log holds. Apart, beta's manifest is written and its copies re-sent."""
    batcher, log = Batcher(_config()), EffectLog()
    for playbook_id in ("alpha", "beta"):
        _feed(batcher, log, range(2), playbook_id)
    written = _write_only_manifests(batcher.close_due(10.0, WALL))
    assert [(m.playbook_id, m.batch_id) for m in written] == [("alpha", 0), ("beta", 0)]

    for playbook_id in ("alpha", "beta"):  # revoked, then assigned again: the view has applied both manifests
        batcher.release(playbook_id)
    for manifest in written:
        batcher.restore(manifest)
    for playbook_id in ("alpha", "beta"):
        batcher.rearm(playbook_id)
        _feed(batcher, log, range(2), playbook_id)  # redelivered from the committed offset
    assert log.counts()["batches_resent"] == 2 and "duplicate_traces" not in log.counts()
    assert sorted(map(str, log.acknowledged())) == ["alpha:0", "alpha:1", "beta:0", "beta:1"]
