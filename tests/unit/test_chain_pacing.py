"""Batches close when the version chain can take them (async fleets, ``combee_core.batch.chain_pacing``), driven
through the batcher's processor without a broker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from combee_core.batch.batching import ShuffleConfig
from combee_core.batch.chain_pacing import ChainPacing, batches_waiting
from combee_core.batch.processor import Batcher, BatcherConfig, pacing_of
from combee_core.control.processor import Controller
from combee_core.models import BatchManifest, ControlDecision, Reflection
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings

WALL = datetime(2026, 1, 1, tzinfo=UTC)


def _batcher(batch_size: int = 4, cap: int | None = 10, max_wait_s: float = 5.0, close_held: bool = True,
             lag: int = 0) -> Batcher:
    return Batcher(BatcherConfig(shuffle=ShuffleConfig(run_seed=1, p=2, context_lag=lag), batch_size=batch_size,
                                 dedupe_horizon=10_000, max_wait_s=max_wait_s,
                                 pacing=ChainPacing(cap, close_held, lag=lag) if cap is not None else None))


def _reflection(number: int, playbook_id: str = "pb") -> Reflection:
    return Reflection(reflection_id=f"r{number}", trace_id=f"t{number}", playbook_id=playbook_id, seen_version=0,
                      insights=[], model="sim", trace_digest=f"d{number}")


def _feed(batcher: Batcher, log: EffectLog, numbers: range, now: float = 0.0) -> None:
    for number in numbers:
        log.extend(batcher.take(_reflection(number), f"pb:{number}", now, WALL))


def _manifests(log: EffectLog) -> list[BatchManifest]:
    return [p.value for p in log.publishes("batches") if isinstance(p.value, BatchManifest)]


def _tick(batcher: Batcher, log: EffectLog, now: float) -> None:
    log.extend(batcher.tick(now, WALL))


def test_a_batch_due_while_the_chain_builds_the_previous_one_keeps_what_arrives_and_closes_when_it_is_a_version():
    batcher, log = _batcher(batch_size=4, cap=10), EffectLog()
    _feed(batcher, log, range(4))
    assert [m.n for m in _manifests(log)] == [4]  # the chain was free: closed at its size
    _feed(batcher, log, range(4, 11), now=1.0)  # 7 more while batch 0 is built: due at 4, held
    assert [m.n for m in _manifests(log)] == [4]
    assert log.acknowledged() == [f"pb:{n}" for n in range(4)]  # held reflections stay uncommitted
    _tick(batcher, log, 2.0)
    assert [m.n for m in _manifests(log)] == [4]
    batcher.take_version("pb", 0)  # version 1, from batch 0
    _tick(batcher, log, 2.1)
    manifests = _manifests(log)
    assert [m.n for m in manifests] == [4, 7] and manifests[1].trace_ids == [f"t{n}" for n in range(4, 11)]
    assert manifests[1].closed_by == "size" and log.acknowledged() == [f"pb:{n}" for n in range(11)]


def test_at_the_cap_a_batch_closes_to_wait_behind_the_one_being_built_but_never_a_second_one():
    batcher, log = _batcher(batch_size=4, cap=5), EffectLog()
    _feed(batcher, log, range(4))  # batch 0 closes (chain free)
    _feed(batcher, log, range(4, 9))  # reaches the cap: batch 1 closes and waits
    assert [m.n for m in _manifests(log)] == [4, 5]
    assert batches_waiting(batcher.accumulator.pending("pb")) == 1
    _feed(batcher, log, range(9, 25))  # 16 more: held, unbatched and unacknowledged
    _tick(batcher, log, 30.0)  # max_wait passed long ago: still held, the chain cannot take it
    assert [m.n for m in _manifests(log)] == [4, 5] and len(log.acknowledged()) == 9
    batcher.take_version("pb", 0)
    _tick(batcher, log, 30.1)  # one waiting again: the held traces close at the cap, oldest first
    assert [m.trace_ids for m in _manifests(log)][2] == [f"t{n}" for n in range(9, 14)]
    assert [m.n for m in _manifests(log)] == [4, 5, 5]
    for batch_id in (1, 2, 3):
        batcher.take_version("pb", batch_id)
        _tick(batcher, log, 31.0 + batch_id)
    assert [m.n for m in _manifests(log)] == [4, 5, 5, 5, 5]  # at the cap, each as the previous one is taken
    batcher.take_version("pb", 4)
    _tick(batcher, log, 34.5)  # the chain is free: the last trace, held while it was busy, closes without waiting
    assert [m.n for m in _manifests(log)] == [4, 5, 5, 5, 5, 1]
    assert sorted(log.acknowledged()) == sorted(f"pb:{n}" for n in range(25))


def test_a_batch_held_while_the_chain_was_busy_closes_below_the_controllers_target_once_the_chain_is_free():
    """Issue 44: the batch holds what arrived while the previous version was built; waiting for the target then
    would leave the chain idle while those traces wait (and a stopped stream's tail wait for the idle rule)."""
    batcher, log = _batcher(batch_size=100, cap=160, max_wait_s=10.0), EffectLog()
    batcher.take_decision(ControlDecision(playbook_id="pb", decision_id=0, batch_size=4, phase="fitted", tau=0.016,
                                          reason="test", decided_at=WALL))
    _feed(batcher, log, range(4))  # the chain was free: batch 0 closes at the target
    batcher.take_decision(ControlDecision(playbook_id="pb", decision_id=1, batch_size=100, phase="fitted", tau=0.016,
                                          reason="test", decided_at=WALL))
    _feed(batcher, log, range(4, 41), now=1.0)  # 37 arrive while batch 0 is built, below the new target 100
    _tick(batcher, log, 2.0)
    assert [m.n for m in _manifests(log)] == [4]
    batcher.take_version("pb", 0)
    _tick(batcher, log, 2.1)  # neither max_wait (10 s) nor idle has passed, nor the target reached
    assert [(m.n, m.target_batch_size) for m in _manifests(log)] == [(4, 4), (37, 100)]
    batcher.take_version("pb", 1)  # the chain is idle now: a new batch fills to the target as before
    _feed(batcher, log, range(41, 60), now=3.0)
    _tick(batcher, log, 3.1)
    assert [m.n for m in _manifests(log)] == [4, 37]

    fixed, log = _batcher(batch_size=100, cap=100, max_wait_s=10.0, close_held=False), EffectLog()
    _feed(fixed, log, range(100))
    _feed(fixed, log, range(100, 137), now=1.0)
    fixed.take_version("pb", 0)
    _tick(fixed, log, 2.1)  # a fixed size (or a profiling controller) keeps the size asked for
    assert [m.n for m in _manifests(log)] == [100]


def test_with_context_lag_1_a_batch_opened_while_one_batch_is_in_flight_closes_below_the_target_once_none_is():
    """Issue 44, run 3: with lag 1, counting as held only what arrived while the context was missing, a batch opened
    with one batch in flight waited for the controller's target (160, chosen as if batches were built one after
    another): one every 8 s, the chain idle half the time. Closing it as soon as its context exists instead made every
    other batch a single trace (measured: 40, 1, 160, 1, 99, 1, ...)."""
    batcher, log = _batcher(batch_size=160, cap=160, max_wait_s=10.0, lag=1), EffectLog()
    batcher.take_decision(ControlDecision(playbook_id="pb", decision_id=0, batch_size=4, phase="fitted", tau=0.016,
                                          reason="test", decided_at=WALL))
    _feed(batcher, log, range(4))  # the chain was idle: batch 0 closes at the target
    batcher.take_decision(ControlDecision(playbook_id="pb", decision_id=1, batch_size=160, phase="fitted", tau=0.016,
                                          reason="test", decided_at=WALL))
    _feed(batcher, log, range(4, 44), now=1.0)  # 40 while batch 0 is built, below the target: no batch of one
    _tick(batcher, log, 2.0)
    assert [m.n for m in _manifests(log)] == [4]
    batcher.take_version("pb", 0)  # the chain is free: the held 40 close without waiting for 160
    _tick(batcher, log, 2.1)
    assert [(m.n, m.target_batch_size) for m in _manifests(log)] == [(4, 4), (40, 160)]
    assert log.acknowledged() == [f"pb:{n}" for n in range(44)]
    _feed(batcher, log, range(44, 54), now=2.5)  # 10 more with batch 1 in flight: they wait for it, not alone
    assert [m.n for m in _manifests(log)] == [4, 40]


def test_the_controllers_new_size_applies_to_the_batch_not_yet_closed():
    batcher, log = _batcher(batch_size=4, cap=20), EffectLog()
    _feed(batcher, log, range(4))
    _feed(batcher, log, range(4, 7))  # 3 held (below the old size)
    batcher.take_decision(ControlDecision(playbook_id="pb", decision_id=0, batch_size=2, phase="fitted", tau=0.016,
                                          reason="test", decided_at=WALL))
    batcher.take_version("pb", 0)
    _tick(batcher, log, 0.5)
    assert [(m.n, m.target_batch_size) for m in _manifests(log)] == [(4, 4), (3, 2)]


def test_without_pacing_batches_close_on_size_however_many_wait():
    batcher, log = _batcher(batch_size=4, cap=None), EffectLog()
    _feed(batcher, log, range(20))
    assert [m.n for m in _manifests(log)] == [4] * 5


def test_pacing_is_for_async_fleets_with_batch_close_chain_and_caps_at_the_quality_bound_with_the_controller():
    load = CombeeSettings.load
    assert pacing_of(load(env={}, fleet_mode="async", auto_batch_size=True, controller_bs_max=160)) == \
        ChainPacing(160, lag=1)
    assert pacing_of(load(env={}, fleet_mode="async", batch_size=30)) == ChainPacing(30, close_held=False, lag=1)
    assert pacing_of(load(env={}, fleet_mode="async", auto_batch_size=True, controller_objective="delay")) == \
        ChainPacing(160, close_held=False, lag=1)
    assert pacing_of(load(env={"COMBEE_CONTEXT_LAG": "0"}, fleet_mode="async", batch_size=30)) == \
        ChainPacing(30, close_held=False, lag=0)
    assert pacing_of(load(env={}, fleet_mode="sync")) is None
    assert pacing_of(load(env={}, fleet_mode="async", batch_close="size")) is None
    with pytest.raises(ValueError, match="at least 1 trace"):
        ChainPacing(0)


def test_the_quality_bound_is_160_in_async_fleets_and_100_in_sync_ones_unless_set():
    """§12e: 160 is the largest batch within 1 point of sequential at fan-in 6; the sync round-time objective keeps
    100 (docs/architecture.md, "The quality bound")."""
    load = CombeeSettings.load
    assert pacing_of(load(env={}, fleet_mode="async", auto_batch_size=True)) == ChainPacing(160, lag=1)
    assert load(env={}, fleet_mode="async").batch_size_bound == 160
    assert load(env={}, fleet_mode="sync").batch_size_bound == 100
    assert load(env={"COMBEE_CONTROLLER_BS_MAX": "120"}, fleet_mode="sync").batch_size_bound == 120
    assert load(env={}, fleet_mode="async", controller_bs_max=100).batch_size_bound == 100
    assert Controller(load(env={}, fleet_mode="async", auto_batch_size=True)).stream("pb").bs_max == 160
    assert Controller(load(env={}, fleet_mode="sync", auto_batch_size=True)).config.bs_max == 100


# Events: ("trace", count) -- that many new reflections; ("version",) -- the chain finishes its oldest pending batch;
# ("tick", seconds) -- time passes and the batcher's timers run.
EVENTS = st.lists(st.one_of(st.tuples(st.just("trace"), st.integers(1, 30)), st.tuples(st.just("version")),
                            st.tuples(st.just("tick"), st.floats(0.1, 8.0))), max_size=60)


def _run(events: list[tuple], batch_size: int, cap: int, close_held: bool = True, lag: int = 0,
         ) -> tuple[list[BatchManifest], EffectLog, int, int]:
    """Drive a paced batcher with ``events``, then let the chain drain everything; the most batches ever waiting, and
    how many times the timers ran with room for a batch (``pending <= lag``) while the open batch held a trace that
    arrived with more batches in flight than now."""
    batcher, log = _batcher(batch_size=batch_size, cap=cap, close_held=close_held, lag=lag), EffectLog()
    now, sent, built, most_waiting, idle_room = 0.0, 0, 0, 0, 0
    in_flight_at_arrival: list[int] = []

    def step() -> None:
        nonlocal most_waiting
        most_waiting = max(most_waiting, batches_waiting(batcher.accumulator.pending("pb"), lag))

    for event in events:
        if event[0] == "trace":
            for number in range(sent, sent + event[1]):
                in_flight_at_arrival.append(batcher.accumulator.pending("pb"))
                _feed(batcher, log, range(number, number + 1), now)
            sent += event[1]
        elif event[0] == "version" and built < len(_manifests(log)):
            batcher.take_version("pb", built)
            built += 1
        elif event[0] == "tick":
            now += event[1]
            _tick(batcher, log, now)
            batched = sum(m.n for m in _manifests(log))  # arrival order is kept: the open traces are the newest
            pending = batcher.accumulator.pending("pb")
            if pending <= lag and any(in_flight > pending for in_flight in in_flight_at_arrival[batched:sent]):
                idle_room += 1
        step()
    for _ in range(10 * sent + 2):  # the stream stopped: the chain builds every batch, the timers close the rest
        if built < len(_manifests(log)):
            batcher.take_version("pb", built)
            built += 1
        now += 5.0
        _tick(batcher, log, now)
        step()
    return _manifests(log), log, most_waiting, idle_room


@settings(max_examples=150, deadline=None)
@given(events=EVENTS, batch_size=st.integers(1, 12), cap=st.integers(1, 20), close_held=st.booleans(),
       lag=st.integers(0, 1))
@example(events=[("trace", 4), ("trace", 3), ("version",), ("tick", 0.5)], batch_size=4, cap=10, close_held=True,
         lag=1)
def test_at_most_one_batch_waits_no_trace_is_lost_or_batched_twice_and_the_same_inputs_give_the_same_batches(
        events: list[tuple], batch_size: int, cap: int, close_held: bool, lag: int):
    manifests, log, most_waiting, idle_room = _run(events, batch_size, cap, close_held, lag)
    sent = sum(event[1] for event in events if event[0] == "trace")
    assert most_waiting <= 1
    if close_held:  # the streaming controller's batches: what arrived while more batches were in flight than now (lag
        # 1: even one, the batch whose reduce the next one's aggregation overlaps) never waits for a target
        assert idle_room == 0
    batched = [t for m in manifests for t in m.trace_ids]
    assert sorted(batched) == sorted(f"t{n}" for n in range(sent)) and len(set(batched)) == len(batched)
    assert [t for m in manifests for t in m.trace_ids] == [f"t{n}" for n in range(sent)]  # arrival order kept
    assert all(m.n <= max(cap, m.target_batch_size) for m in manifests)
    assert sorted(log.acknowledged()) == sorted(f"pb:{n}" for n in range(sent))
    assert all(m.context_lag == lag for m in manifests)  # whatever the timing: the version read is max(0, b - lag)
    again, _, _, _ = _run(events, batch_size, cap, close_held, lag)
    assert [(m.trace_ids, m.seed, m.subgroup_sizes) for m in again] == \
        [(m.trace_ids, m.seed, m.subgroup_sizes) for m in manifests]


def test_status_says_how_many_batches_wait_for_the_chain():
    from streams.topology.observe import RunStatus, format_status

    report = format_status(RunStatus(versions={"pb": 3}, waiting={"pb": (140, 12.0)}, pending={"pb": 2}))
    assert "140 trace(s) batched, not yet in a version (oldest batch 12 s ago); batches: 1 being built, 1 waiting " \
           "for the chain" in report


def test_with_pacing_the_reflectors_word_that_nothing_is_left_closes_a_batch_once_the_chain_is_free():
    """Without ``batch_idle_s``: the stream's last traces need not wait ``max_wait_s`` (10 s by default)."""
    for pacing, closes in ((10, True), (None, False)):
        batcher, log = _batcher(batch_size=40, cap=pacing, max_wait_s=10.0), EffectLog()
        for number in range(6):  # a reflection every 0.05 s: 10 gaps are the floor, 0.5 s
            log.extend(batcher.take(_reflection(number), f"pb:{number}", number * 0.05, WALL))
        log.extend(effect for effects in batcher.close_due(0.25 + 0.6, WALL, drained=["pb"]) for effect in effects)
        assert [m.closed_by for m in _manifests(log)] == (["idle"] if closes else []), pacing
