"""What ``combee status`` says about capacity and backlog (``combee_core.control.capacity``)."""

from __future__ import annotations

import pytest

from combee_core.control.capacity import CapacityModel, recent_rate, status_backlog, version_cycles


def test_recent_rate_needs_a_long_enough_span() -> None:
    assert recent_rate([0.0, 1.0, 2.0]) == pytest.approx(1.0)
    assert recent_rate([0.0, 0.04], min_span_s=10) is None  # a burst of two records says nothing of the rate
    assert recent_rate([0.0, 10.0, 20.0], counts=[40, 40, 60], min_span_s=10) == pytest.approx(5.0)


def test_a_version_s_cycle_excludes_its_wait_for_the_previous_one() -> None:
    # the second batch closed long before the first version was out: its cycle is from that version on
    assert version_cycles([100.0, 104.0, 108.5], [3.0, 9.0, 4.0]) == [4.0, 4.0]


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
