"""One log line per condition: the first occurrence is said, then at most one line per interval with the count of
occurrences it stands for (combee_core.log_limit, driven by an injected clock)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from combee_core.log_limit import MAX_CONDITIONS, RepeatLimit


def test_the_first_occurrence_is_said_then_one_line_per_interval_with_the_count():
    limit = RepeatLimit[str](interval_s=60.0)
    assert limit.observe("pb v4", 0.0) == 1
    assert [limit.observe("pb v4", t) for t in (1.0, 2.0, 59.9)] == [None, None, None]
    assert limit.observe("pb v4", 60.0) == 4  # this one and the three not said
    assert limit.observe("pb v5", 60.5) == 1  # another condition is its own


def test_an_ended_condition_is_said_at_once_when_it_comes_back():
    limit = RepeatLimit[str](interval_s=60.0)
    limit.observe("waiting", 0.0)
    limit.observe("waiting", 1.0)
    assert limit.end("waiting") == 1
    assert limit.observe("waiting", 2.0) == 1


def test_memory_is_bounded_by_forgetting_quiet_conditions():
    limit = RepeatLimit[int](interval_s=1.0)
    for key in range(3 * MAX_CONDITIONS):
        limit.observe(key, float(key))
    assert len(limit._said_at) <= MAX_CONDITIONS + 1


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5)), max_size=200), st.floats(0.1, 3))
def test_lines_stand_for_every_occurrence_and_are_at_least_an_interval_apart(events, interval):
    limit = RepeatLimit[str](interval_s=interval)
    said: dict[str, list[float]] = {}
    counted: dict[str, int] = {}
    now = 0.0
    for key, step in events:
        now += step
        if (count := limit.observe(key, now)) is not None:
            said.setdefault(key, []).append(now)
            counted[key] = counted.get(key, 0) + count
    for key, times in said.items():
        assert all(b - a >= interval for a, b in zip(times, times[1:]))
        occurrences = sum(1 for k, _ in events if k == key)
        assert counted[key] + limit.end(key) == occurrences  # said, or still to be said: none lost


async def test_calls_that_cannot_be_recorded_make_one_line_not_one_each(caplog):
    import logging
    from types import SimpleNamespace

    from combee_core.settings import CombeeSettings
    from streams.topology.llm_setup import build_llm_roles
    from tests.unit.test_llm_roles import make_trace

    async def broken_send(*args, **kwargs):
        raise ConnectionError("broker gone")

    producer = SimpleNamespace(count=lambda name: None, send=broken_send)
    settings = CombeeSettings(sim_clock="virtual")  # the modelled latency is not slept: 20 calls, not 30 s
    roles = build_llm_roles(settings, producer_ctx=producer)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="streams.topology.llm_setup"):
        for i in range(20):
            await roles.reflect(make_trace(i))
    lines = [r.getMessage() for r in caplog.records if "could not record" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(": broker gone")
