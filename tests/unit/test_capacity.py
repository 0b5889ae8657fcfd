"""What ``combee status`` says about capacity and backlog (``combee_core.control.capacity``)."""

from __future__ import annotations

import pytest

from combee_core.control.backlog import rate_between_versions
from combee_core.control.capacity import CapacityModel, rate_until_now, recent_rate, status_backlog, version_cycles


def test_recent_rate_needs_a_long_enough_span() -> None:
    assert recent_rate([0.0, 1.0, 2.0]) == pytest.approx(1.0)
    assert recent_rate([0.0, 0.04], min_span_s=10) is None  # a burst of two records says nothing of the rate
    assert recent_rate([0.0, 10.0, 20.0], counts=[40, 40, 60], min_span_s=10) == pytest.approx(5.0)


def test_a_version_s_cycle_excludes_its_wait_for_the_previous_one() -> None:
    # the second batch closed long before the first version was out: its cycle is from that version on
    assert version_cycles([100.0, 104.0, 108.5], [3.0, 9.0, 4.0]) == [4.0, 4.0]


def test_with_the_context_lag_a_version_right_after_another_is_not_a_free_cycle() -> None:
    """Lag 1: the third batch closed at 104, its version came 0.5 s after the second's: its cycle is half its
    own 4.5 s, not the 0.5 s gap (combee status's chain capacity would read 9x too high)."""
    published, delays = [100.0, 108.0, 108.5], [4.0, 6.0, 4.5]
    assert version_cycles(published, delays) == [6.0, 0.5]
    assert version_cycles(published, delays, lag=1) == [6.0, 2.25]


def test_status_says_falling_behind_only_on_measured_rates_or_an_old_trace() -> None:
    behind = status_backlog("pb", 400, oldest_sent_s=70.0, now=100.0, rate_in=20.0, rate_out=11.0,
                            warn_after_s=120, window_s=20)
    assert behind.falling_behind and behind.catch_up_s is None and behind.lag_s == 30.0
    starting = status_backlog("pb", 2, oldest_sent_s=95.0, now=100.0, rate_in=None, rate_out=None,
                              warn_after_s=120, window_s=20)
    assert not starting.falling_behind
    draining = status_backlog("pb", 100, oldest_sent_s=70.0, now=100.0, rate_in=5.0, rate_out=15.0,
                              warn_after_s=120, window_s=20)
    assert not draining.falling_behind and draining.catch_up_s == pytest.approx(10.0)
    stalled = status_backlog("pb", 5, oldest_sent_s=0.0, now=200.0, rate_in=None, rate_out=None,
                             warn_after_s=120, window_s=20)
    assert stalled.falling_behind


def test_the_capacity_model_is_written_out() -> None:
    text = CapacityModel(reflect_latency_s=1.0, concurrency=8, concurrency_max=64, batch_size=40,
                         cycle_s=3.6).describe()
    assert "8 traces/s per worker at concurrency 8, up to 64 at the ceiling 64" in text
    assert "batch 40 every 3.60 s (median cycle) = 11.1 traces/s per playbook" in text
    assert CapacityModel(None, 8, 64, None, None).describe() == "no calls or versions measured yet"


def test_the_rate_in_is_that_of_the_window_up_to_now() -> None:
    """20 traces/s for 60 s: status at 50 s reads 20; 30 s after the stream stopped it reads 0, not 20."""
    sent = [i / 20 for i in range(1200)]
    assert rate_until_now(sent, now=50.0, window_s=20) == pytest.approx(20.0, rel=0.01)
    assert rate_until_now(sent, now=90.0, window_s=20) == 0.0
    assert rate_until_now(sent[:100], now=5.0, window_s=20) == pytest.approx(99 / 5)  # a young stream
    assert rate_until_now([3.0], now=5.0, window_s=20) is None


def test_the_rate_out_is_the_recent_versions_between_versions_not_the_run_s_mean() -> None:
    """A ramp of versions of 40 every 4 s, then versions of 100 every 4.5 s: status reads the 22 of now, not a mean
    over the run; and when versions stop for two gaps, the rate out falls to say so."""
    outs = [(4.0 * i, 40) for i in range(10)] + [(36.0 + 4.5 * i, 100) for i in range(1, 11)]
    now = outs[-1][0] + 1
    assert rate_between_versions(outs, now, window_s=20) == pytest.approx(100 / 4.5)
    assert rate_between_versions(outs, now + 20, window_s=20) < 100 / 4.5 / 2


def test_over_capacity_status_says_in_out_and_never_catches_up_then_the_catch_up_once_the_stream_stops() -> None:
    """A stream of 30 traces/s against a chain of 22: falling behind, no catch-up; once it stops, in reads 0 and
    the catch-up is lag / out."""
    sent = [i / 30 for i in range(30 * 120)]
    outs = [(10.0 + 4.5 * i, 100) for i in range(24)]
    now = 118.0
    behind = status_backlog("pb", 900, oldest_sent_s=88.0, now=now, rate_in=rate_until_now(sent, now, 20),
                            rate_out=rate_between_versions(outs, now, 20), warn_after_s=120, window_s=20)
    assert behind.falling_behind and behind.catch_up_s is None
    assert behind.rate_in == pytest.approx(30, rel=0.02) and behind.rate_out == pytest.approx(100 / 4.5)
    outs += [(10.0 + 4.5 * i, 100) for i in range(24, 30)]
    now = 140.0  # 20 s after the last send
    stopped = status_backlog("pb", 600, oldest_sent_s=110.0, now=now, rate_in=rate_until_now(sent, now, 20),
                             rate_out=rate_between_versions(outs, now, 20), warn_after_s=120, window_s=20)
    assert stopped.rate_in == 0.0 and stopped.catch_up_s == pytest.approx(600 / (100 / 4.5))
