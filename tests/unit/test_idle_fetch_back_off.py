"""The idle back-off of the fetch wait (combee_core.partitions.fetch_wait) and where the profile and settings carry
it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.partitions.fetch_wait import TANSU_IDLE_FETCH_WAIT_MS, IdleFetchWait
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology.gapless_consumer import new_consumer

outcomes = st.lists(st.tuples(st.booleans(), st.floats(min_value=0, max_value=5)), max_size=60)


@given(floor=st.integers(0, 200), ceiling=st.integers(0, 2000), fetches=outcomes)
def test_the_wait_stays_between_floor_and_ceiling_and_returns_to_the_floor_on_records(
        floor: int, ceiling: int, fetches: list[tuple[bool, float]]) -> None:
    wait = IdleFetchWait(floor, ceiling)
    now = 0.0
    for got_records, gap in fetches:
        now += gap
        before = wait.wait_ms
        ms = wait.observe(got_records, now)
        assert floor <= ms <= max(floor, ceiling)
        if got_records:
            assert ms == floor
        else:
            assert ms >= before  # an empty fetch never shortens the wait


def test_a_consumer_idle_for_a_second_backs_off_step_by_step_to_the_ceiling() -> None:
    wait = IdleFetchWait(50, 500)
    seen = [wait.observe(False, t / 10) for t in range(20)]  # an empty fetch every 100 ms
    assert seen[:10] == [50] * 10  # the first second: still the floor
    assert seen[10:15] == [100, 200, 400, 500, 500]
    assert wait.observe(True, 2.0) == 50
    assert wait.observe(False, 2.5) == 50  # quiet again: a new second must pass


def test_a_ceiling_at_the_floor_turns_the_back_off_off() -> None:
    wait = IdleFetchWait(50, 50)
    assert {wait.observe(False, float(t)) for t in range(30)} == {50}


def test_the_back_off_is_tansus_only_and_a_setting() -> None:
    assert BrokerProfile.for_tansu().idle_fetch_max_wait_ms == TANSU_IDLE_FETCH_WAIT_MS
    assert BrokerProfile.for_kafka().with_idle_fetch_wait(300).idle_fetch_max_wait_ms is None
    assert BrokerProfile.for_tansu().with_idle_fetch_wait(300).idle_fetch_max_wait_ms == 300
    settings = CombeeSettings.load(env={"COMBEE_TANSU_IDLE_FETCH_WAIT_MS": "250"})
    assert settings.tansu_idle_fetch_wait_ms == 250
    with pytest.raises(ValueError):
        CombeeSettings.load(env={"COMBEE_TANSU_IDLE_FETCH_WAIT_MS": "0"})


async def test_a_tansu_consumer_backs_off_from_its_own_wait() -> None:
    profile = BrokerProfile.for_tansu().with_idle_fetch_wait(400)
    consumer = new_consumer("127.0.0.1:1", profile, None, fetch_max_wait_ms=20)
    assert (consumer.fetch_wait.floor_ms, consumer.fetch_wait.ceiling_ms) == (20, 400)  # type: ignore[attr-defined]
