"""Falling behind, measured (``combee_core.control.backlog``): lag, rates in and out, the verdict, and what sampling
sheds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.control.backlog import Backlog, BacklogMonitor, keep_fraction, kept


def stream(monitor: BacklogMonitor, rate_in: float, rate_out: float, seconds: int, start: int = 0) -> Backlog:
    """Traces sent at ``rate_in`` and learned at ``rate_out`` (oldest first), assessed every second."""
    backlog = None
    sent = learned = 0
    for second in range(1, seconds + 1):
        now = float(start + second)
        while sent < rate_in * second:
            monitor.consumed("pb", f"t{sent}", now)
            sent += 1
        done = min(sent, int(rate_out * second))
        monitor.settled("pb", [f"t{i}" for i in range(learned, done)])
        learned = done
        backlog = monitor.assess("pb", now)
    assert backlog is not None
    return backlog


def test_a_stream_faster_than_its_versions_is_falling_behind_with_rates_and_no_catch_up() -> None:
    backlog = stream(BacklogMonitor(window_s=20), rate_in=20, rate_out=11, seconds=30)
    assert backlog.falling_behind
    assert backlog.rate_in == pytest.approx(20, rel=0.1) and backlog.rate_out == pytest.approx(11, rel=0.1)
    assert backlog.lag_traces == 30 * 9 and backlog.lag_s > 10
    assert backlog.catch_up_s is None and "never catches up" in backlog.describe()


def test_a_stream_within_capacity_keeps_up() -> None:
    backlog = stream(BacklogMonitor(window_s=20), rate_in=10, rate_out=10, seconds=30)
    assert not backlog.falling_behind and backlog.lag_traces == 0 and backlog.catch_up_s == 0.0


def test_unread_records_count_and_their_age_shows() -> None:
    monitor = BacklogMonitor(window_s=10, warn_after_s=60)
    monitor.unread("pb", 500, oldest_sent_at_s=0.0)
    backlog = monitor.assess("pb", 100.0)
    assert backlog.lag_traces == 500 and backlog.lag_s == 100.0 and backlog.falling_behind  # older than warn_after


def test_a_settled_trace_read_again_is_not_pending_again() -> None:
    monitor = BacklogMonitor()
    monitor.consumed("pb", "t", 1.0)
    assert monitor.settled("pb", ["t"]) == 1
    monitor.consumed("pb", "t", 1.0)
    assert monitor.assess("pb", 2.0).lag_traces == 0


def test_sampling_sheds_successes_first() -> None:
    behind = Backlog("pb", 100, 30.0, rate_in=20.0, rate_out=10.0, falling_behind=True, catch_up_s=None)
    failures, successes = keep_fraction(behind, failure_share=0.3)
    assert failures == 1.0 and successes == pytest.approx((9 - 6) / 14)
    assert keep_fraction(behind, failure_share=0.8) == (pytest.approx(9 / 16), 0.0)
    fine = Backlog("pb", 0, 0.0, 10.0, 10.0, False, 0.0)
    assert keep_fraction(fine, 0.3) == (1.0, 1.0)


@given(st.floats(0.01, 1000), st.floats(0, 1000), st.floats(0, 1))
def test_what_is_kept_fits_the_rate_out(rate_in, rate_out, failure_share) -> None:
    behind = Backlog("pb", 1, 1.0, rate_in, rate_out, True, None)
    keep_failures, keep_successes = keep_fraction(behind, failure_share)
    assert 0 <= keep_failures <= 1 and 0 <= keep_successes <= 1
    kept_rate = rate_in * (failure_share * keep_failures + (1 - failure_share) * keep_successes)
    assert kept_rate <= 0.9 * rate_out + 1e-6
    assert keep_successes == 0 or keep_failures == 1  # successes go first


def test_the_draw_is_stable_and_near_its_share() -> None:
    draws = [kept(f"t{i}", 0.3, seed=1) for i in range(4000)]
    assert draws == [kept(f"t{i}", 0.3, seed=1) for i in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(0.3, abs=0.03)


def test_a_batch_filling_up_is_not_falling_behind() -> None:
    """A few traces waiting a second or two for their batch (in > out for a moment) raise no flag."""
    monitor = BacklogMonitor(window_s=20)
    for second in range(25):
        monitor.consumed("pb", f"t{second}", float(second))
        if second >= 2:
            monitor.settled("pb", [f"t{second - 2}"])
        backlog = monitor.assess("pb", second + 0.5)
        assert not backlog.falling_behind


def test_a_pipeline_filling_up_before_its_first_version_is_not_behind_but_one_that_never_makes_one_is() -> None:
    monitor = BacklogMonitor(window_s=20, warn_after_s=60)
    for second in range(30):  # 10 traces/s, the first version only at 25 s
        for i in range(10):
            monitor.consumed("pb", f"t{second}-{i}", float(second))
        if second == 25:
            monitor.settled("pb", [f"t{s}-{i}" for s in range(20) for i in range(10)])
        assert not monitor.assess("pb", second + 0.5).falling_behind
    stalled = BacklogMonitor(window_s=20, warn_after_s=60)
    stalled.consumed("pb", "t", 0.0)
    assert not stalled.assess("pb", 59.0).falling_behind
    assert stalled.assess("pb", 61.0).falling_behind


def test_a_stream_at_capacity_with_noisy_rates_is_keeping_up() -> None:
    """20.4 in vs 20 out with a 12 s latency (measured in the sustained bench at 20 traces/s) is not falling behind."""
    backlog = stream(BacklogMonitor(window_s=20), rate_in=20.4, rate_out=20.0, seconds=30)
    assert backlog.lag_traces > 0 and not backlog.falling_behind


def test_the_rate_out_of_a_steady_chain_is_measured_between_versions() -> None:
    """Versions of 100 every 5 s against 20 traces/s sent: 20 out, whatever the window's phase (the sustained bench
    read 15 out of a window holding 3 versions, and flagged a stream that kept up)."""
    monitor = BacklogMonitor(window_s=20)
    sent = 0
    for tenth in range(1, 1201):  # 120 s
        now = tenth / 10
        while sent < 20 * now:
            monitor.consumed("pb", f"t{sent}", now)
            sent += 1
        if tenth % 50 == 0 and now > 10:  # a version every 5 s learns the 100 traces sent 10-5 s before it
            first = int(20 * (now - 10))
            monitor.settled("pb", [f"t{i}" for i in range(first, first + 100)], now)
        backlog = monitor.assess("pb", now)
        if now > 40:
            assert backlog.rate_out == pytest.approx(20.0, rel=0.05), now
            assert not backlog.falling_behind, now


def test_shed_traces_count_in_not_out() -> None:
    monitor = BacklogMonitor(window_s=10)
    monitor.consumed("pb", "kept", 0.0)
    monitor.settled("pb", ["kept"], 1.0)
    monitor.assess("pb", 1.0)
    for i in range(20):
        monitor.shed("pb", f"s{i}")
    backlog = monitor.assess("pb", 11.0)
    assert backlog.lag_traces == 0 and backlog.rate_in == pytest.approx(2.0) and backlog.rate_out == 0.0


def _chain(monitor: BacklogMonitor, rate_in: float, cycles: list[float], batch: int = 100) -> list[tuple[float, bool]]:
    """Traces sent at ``rate_in``; batch i (the next ``batch`` of them) closes when its last one is sent, and its
    version comes ``cycles[i]`` seconds after the later of its close and the previous version. Returns (time,
    falling behind) at every tenth of a second until the last version."""
    published, previous = [], 0.0
    for i, cycle in enumerate(cycles):
        previous = max(batch * (i + 1) / rate_in, previous) + cycle
        published.append(previous)
    sent, flags, version = 0, [], 0
    for tenth in range(1, int(10 * published[-1]) + 1):
        at = tenth / 10
        while sent < rate_in * at:
            monitor.consumed("pb", f"t{sent}", sent / rate_in)
            sent += 1
        while version < len(published) and at >= published[version]:
            monitor.settled("pb", [f"t{i}" for i in range(batch * version, batch * (version + 1))], at)
            version += 1
        flags.append((at, monitor.assess("pb", at).falling_behind))
    return flags


def test_a_chain_that_keeps_up_through_a_slow_spell_is_not_falling_behind() -> None:
    """The sustained bench at 20 traces/s (batch 100): a version 3.9 s after its batch closed, then three that took
    5.8 s each (the machine's load; ~17 traces/s out over the window), then 3.9 s again while it catches up. The
    oldest trace waits ~10 s at steady state, half the window; the flag came up (lag 204, oldest 10 s, in 20, out
    17.3). It is a chain keeping up."""
    spell = [3.9] * 20 + [5.8] * 3 + [3.9] * 10
    flags = _chain(BacklogMonitor(window_s=20), 20.0, spell)
    assert not [at for at, flag in flags if flag]
    # the same spell with the old bar (the oldest older than half the window) raised it
    monitor = BacklogMonitor(window_s=20)
    monkey = pytest.MonkeyPatch()
    monkey.setattr("combee_core.control.backlog.STEADY_AGE_GAPS", 0.0)
    try:
        old = _chain(monitor, 20.0, spell)
    finally:
        monkey.undo()
    assert [at for at, flag in old if flag]


def test_a_stream_above_the_chain_s_capacity_is_said_within_30_s() -> None:
    """30 traces/s against versions of 100 every 4.5 s (22 traces/s): said within 30 s of the stream's start."""
    flags = _chain(BacklogMonitor(window_s=20), 30.0, [4.5] * 20)
    first = min((at for at, flag in flags if flag), default=None)
    assert first is not None and first <= 30.0, first
