"""The controller's streaming objective (async fleets): the batch grows with the arrival rate so versions keep up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from combee_core.control.processor import Controller
from combee_core.control.streaming import StreamingObjective
from combee_core.models import BatchMetrics, ControlDecision
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fed(rate: float, cycle_of, sizes=(40,) * 6, bs_max: int = 100) -> StreamingObjective:
    """An objective that saw batches of ``sizes`` arrive at ``rate`` traces/s with cycles ``cycle_of(bs)``."""
    objective, at = StreamingObjective(1, bs_max), 0.0
    for size in sizes:
        at += size / rate
        objective.observe(size, at, cycle_of(size))
    return objective


def test_the_issue_stream_gets_a_batch_that_keeps_up() -> None:
    """20 traces/s, batch 40 took 3.6 s per version (the issue's measurement): the chain took ~11 traces/s; the
    cycle grows as bs^0.3 (benchmarks-history.md §1: ~4.2 s at 30, ~6 s at 100)."""
    choice = fed(20.0, lambda bs: 3.6 * (bs / 40) ** 0.3, sizes=(30, 40, 60) * 2).choose()
    assert choice is not None and not choice.over_capacity
    assert choice.rate_per_s == pytest.approx(20.0)
    assert choice.batch_size == 100 and choice.capacity_per_s > 20  # keeps up, without the 20% headroom
    assert "not measured" in choice.reason(1, 100, 0.8)  # modelled: it goes to 100 to measure it
    there = fed(20.0, lambda bs: 3.6 * (bs / 40) ** 0.3, sizes=(30, 40, 60) * 2 + (100, 100)).choose()
    assert there is not None and there.batch_size == 100 and not there.over_capacity
    assert "without headroom" in there.reason(1, 100, 0.8)
    slower = fed(12.0, lambda bs: 3.6 * (bs / 40) ** 0.3, sizes=(30, 40, 60) * 2).choose()
    assert slower is not None and slower.latency_s is not None and 40 < slower.batch_size < 100
    assert 12.0 * slower.cycle.cycle_s(slower.batch_size) / slower.batch_size < 0.8  # the chain has headroom


def test_a_slow_stream_gets_small_fresh_batches() -> None:
    choice = fed(1.0, lambda bs: 2.0, sizes=(10,) * 5).choose()
    assert choice is not None and choice.batch_size < 10 and not choice.over_capacity


def test_beyond_the_quality_bound_it_says_over_capacity() -> None:
    choice = fed(200.0, lambda bs: 3.6 * (bs / 40) ** 0.5, sizes=(40,) * 6 + (100,) * 2).choose()
    assert choice is not None and choice.over_capacity and choice.batch_size == 100
    assert "falls behind" in choice.reason(1, 100, 0.8)


def test_nothing_chosen_before_rate_and_cycle_are_known() -> None:
    objective = StreamingObjective(1, 100)
    assert objective.choose() is None
    objective.observe(40, 10.0, 3.0)
    assert objective.choose() is None  # one close: no rate yet


def test_two_sizes_fit_the_cycle_exponent() -> None:
    objective = fed(20.0, lambda bs: 0.5 * bs**0.8, sizes=(20, 40, 80, 20, 40, 80))
    model = objective.cycle_model()
    assert model is not None and model.fitted and model.beta == pytest.approx(0.8, abs=1e-6)


@given(st.floats(0.05, 500), st.floats(0.05, 20), st.floats(0, 1))
def test_a_choice_within_bounds_keeps_up_or_says_it_cannot(rate, c, beta) -> None:
    choice = fed(rate, lambda bs: c * bs**beta, sizes=(40,) * 6 + (100,) * 2).choose()
    assert choice is not None and 1 <= choice.batch_size <= 100
    utilisation = rate * choice.cycle.cycle_s(choice.batch_size) / choice.batch_size
    assert choice.latency_s is None or utilisation < 0.8
    if choice.latency_s is None:  # then no size in the bounds has the headroom, and the bound is the most it takes
        assert choice.batch_size == 100
        assert all(rate * choice.cycle.cycle_s(bs) / bs >= 0.8 for bs in range(1, 101))
        assert choice.over_capacity == (utilisation >= 1)


@hypothesis_settings(deadline=None)  # two choices over 100 sizes each: a loaded machine takes over 200 ms
@given(st.floats(0.05, 200), st.floats(1.05, 4), st.floats(0.05, 20), st.floats(0, 0.9))
def test_the_batch_grows_with_the_arrival_rate(rate, faster, c, beta) -> None:
    """Async: a faster stream never gets a smaller batch (the same cycles, ``faster`` x the arrivals)."""
    slow = fed(rate, lambda bs: c * bs**beta, sizes=(20, 40) * 3).choose()
    fast = fed(rate * faster, lambda bs: c * bs**beta, sizes=(20, 40) * 3).choose()
    assert slow is not None and fast is not None and fast.batch_size >= slow.batch_size


def test_over_capacity_is_said_on_the_bound_s_own_cycles_not_the_model_s_extrapolation() -> None:
    """§12b's run: the ramp's batches of 40 at 19.3 traces/s took 5.6 s each (one size: beta 1/2 assumed, so 100
    would take 8.9 s: 11.3 traces/s, "over capacity"); versions of 100 then took ~4.5 s (22 traces/s)."""
    objective, at = StreamingObjective(1, 100), 0.0
    for _ in range(7):
        at += 40 / 19.3
        objective.observe(40, at, 5.6)
    ramp = objective.choose()
    assert ramp is not None and ramp.batch_size == 100 and not ramp.over_capacity and ramp.measured_cycle_s is None
    assert "not measured" in ramp.reason(1, 100, 0.8)
    for cycle in (4.4, 4.6, 4.5):
        at += 100 / 20.0
        objective.observe(100, at, cycle)
    steady = objective.choose()
    assert steady is not None and steady.batch_size == 100 and not steady.over_capacity
    assert steady.measured_cycle_s == pytest.approx(4.5) and steady.capacity_per_s == pytest.approx(100 / 4.5)
    for cycle in (4.5, 4.5, 4.5, 4.5):  # the stream speeds up to 30/s; the chain still takes 22
        at += 100 / 30.0
        objective.observe(100, at, cycle)
    over = objective.choose()
    assert over is not None and over.over_capacity and over.capacity_per_s == pytest.approx(100 / 4.5)
    assert "falls behind" in over.reason(1, 100, 0.8)


def metrics(batch_id: int, size: int, closed_s: float, delay_s: float, round_s: float | None) -> BatchMetrics:
    return BatchMetrics(playbook_id="pb", batch_id=batch_id, version=batch_id + 1, batch_size=size, k=6,
                        delay_s=delay_s, llm_critical_path_s=delay_s, llm_calls=7, round_s=round_s,
                        batch_closed_at=T0 + timedelta(seconds=closed_s))


def test_the_controller_raises_the_batch_when_the_stream_outruns_the_versions() -> None:
    """Batches of 40 close every 2 s (20/s); each version waits for the previous one: the delay grows, the cycle
    (the round, when shorter) stays 3.6 s. The async controller no longer shrinks the batch: it raises it."""
    settings = CombeeSettings.load(env={}, auto_batch_size=True, fleet_mode="async")
    controller, log = Controller(settings), EffectLog()
    for batch in range(6):
        delay = 3.6 + batch * 1.6  # the backlog: each version is later after its close than the last
        log.extend(controller.take(metrics(batch, 40, 2.0 * batch, delay, 3.6 if batch else None), f"m{batch}", T0))
    decisions = log.published("control")
    assert decisions, "no decision"
    last = decisions[-1]
    assert isinstance(last, ControlDecision) and last.batch_size > 40 and "streaming" in last.reason
    from combee_core.control.controller import explain_decision

    assert "tau" not in explain_decision(last) and "arrival rate" in explain_decision(last)


def test_an_idle_batch_closes_before_max_wait() -> None:
    """The stream stops: the open batch closes batch_idle_s after its last reflection at most, not max_wait_s after
    the first."""
    from combee_core.batch.batching import BatchAccumulator, ShuffleConfig
    from tests.unit.test_processor_batcher import _reflection

    accumulator = BatchAccumulator(ShuffleConfig(run_seed=0, p=2), default_batch_size=100)
    for i in range(5):  # a slow stream: a reflection every 2 s
        accumulator.add(_reflection(i), float(i) * 2.0, T0)
    assert accumulator.close_expired(10.0, max_wait_s=30.0, wall_time=T0, idle_s=3.0) == []
    [closed] = accumulator.close_expired(11.0, max_wait_s=30.0, wall_time=T0, idle_s=3.0)
    assert closed.manifest.closed_by == "idle" and closed.manifest.n == 5
    accumulator.add(_reflection(9), 12.0, T0)
    assert accumulator.close_expired(30.0, max_wait_s=30.0, wall_time=T0) == []  # off without idle_s


def test_a_fast_stream_that_stops_closes_its_batch_at_its_own_pace_once_the_reflector_says_it_is_drained() -> None:
    """At 20 reflections/s, once the reflector said no trace was left to reflect, no reflection for 0.5 s (10 of its
    gaps) says the stream stopped: the last batch does not wait the whole batch_idle_s. Without the reflector's word
    (it may be stalled with traces waiting) and for a slow stream, it still waits batch_idle_s."""
    from combee_core.batch.batching import IDLE_FLOOR_S, BatchAccumulator, ShuffleConfig, idle_after
    from tests.unit.test_processor_batcher import _reflection

    accumulator = BatchAccumulator(ShuffleConfig(run_seed=0, p=2), default_batch_size=1000)
    for i in range(200):
        accumulator.add(_reflection(i), i * 0.05, T0)
    last = 199 * 0.05
    early = last + IDLE_FLOOR_S + 0.01  # 10 gaps of 0.05 s (up to rounding)
    assert accumulator.close_expired(early, max_wait_s=60.0, wall_time=T0, idle_s=3.0) == []  # not drained
    assert accumulator.close_expired(early - 0.1, max_wait_s=60.0, wall_time=T0, idle_s=3.0, drained={"pb"}) == []
    [closed] = accumulator.close_expired(early, max_wait_s=60.0, wall_time=T0, idle_s=3.0, drained={"pb"})
    assert closed.manifest.closed_by == "idle" and closed.manifest.n == 200
    assert idle_after(None, 3.0) == 3.0  # one reflection gives no pace: the whole idle wait
    assert idle_after(0.2, 3.0) == 2.0 and idle_after(1.0, 3.0) == 3.0 and idle_after(0.01, 3.0) == IDLE_FLOOR_S
    accumulator.add(_reflection(500), last + 60.0, T0)  # a minute's pause: the pace it knew no longer holds
    accumulator.add(_reflection(501), last + 60.05, T0)
    assert accumulator.close_expired(last + 62.0, max_wait_s=60.0, wall_time=T0, idle_s=3.0, drained={"pb"}) == []


def test_no_size_is_modelled_faster_than_the_fastest_version_measured() -> None:
    """The outside fleet at load ~30 (issue 44, docs/benchmarks.md "Controller ... seventh session"): a backlog,
    arrivals at the batcher at ~3 traces/s, cycles proportional to the batch (0.252 * bs, beta fitted at 1): every
    size took the same traces per second and 1 minimised the latency. A version of 1 trace is not 0.25 s when none
    measured was under 3 s: floored at the fastest version, the size holds what arrives during one."""
    choice = fed(3.14, lambda bs: 0.252 * bs, sizes=(12, 40, 52, 12, 40, 52)).choose()
    assert choice is not None and choice.cycle.beta == pytest.approx(1.0)
    assert choice.cycle.floor_s == pytest.approx(0.252 * 12) and "at least 3.02 s" in choice.cycle.describe()
    assert choice.batch_size >= 12 and 3.14 * choice.cycle.cycle_s(choice.batch_size) / choice.batch_size < 0.8
