"""A stopped consumer leaves its group at Tansu's first generation (0) too (streams/broker/group_leave.py); the
integration test on a real Tansu is tests/integration/test_group_leave.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.group import LeaveGroupRequest

from streams.broker.group_leave import leave_on_stop, needs_own_leave


@pytest.mark.parametrize(("generation", "member_id", "instance", "own"), [
    (0, "m-1", None, True),  # Tansu's first generation: aiokafka would not leave
    (-1, "m-1", None, True),  # an id but no generation yet: stopped during its join
    (1, "m-1", None, False),  # aiokafka's own leave runs
    (0, "", None, False),  # never known to the broker
    (0, "m-1", "static-1", False),  # a static member never leaves
])
def test_which_members_need_a_leave_aiokafka_does_not_send(generation: int, member_id: str, instance: str | None,
                                                           own: bool) -> None:
    assert needs_own_leave(generation, member_id, instance) is own


def _coordinator(generation: int, sent: list[Any], *, fails: bool = False) -> Any:
    """A GroupCoordinator with only what leaving uses: its request goes to ``sent``."""
    coordinator: Any = object.__new__(GroupCoordinator)
    coordinator.group_id, coordinator.member_id, coordinator.generation = "g", "m-1", generation
    coordinator._group_instance_id = None
    coordinator._rejoin_needed_fut = asyncio.get_running_loop().create_future()

    async def send(request: Any) -> Any:
        if fails:
            raise KafkaConnectionError("gone")
        sent.append(request)
        return SimpleNamespace(error_code=0)

    async def aiokafka_leave() -> None:
        sent.append("aiokafka's leave")

    coordinator._send_req, coordinator._maybe_leave_group = send, aiokafka_leave
    return coordinator


async def test_a_member_of_generation_0_sends_a_leave_group_and_forgets_its_id() -> None:
    sent: list[Any] = []
    coordinator = _coordinator(0, sent)
    consumer = SimpleNamespace(_coordinator=coordinator)
    leave_on_stop(consumer)  # type: ignore[arg-type]
    leave_on_stop(consumer)  # type: ignore[arg-type]  # twice: wrapped once
    await coordinator._maybe_leave_group()
    assert len(sent) == 1 and isinstance(sent[0], LeaveGroupRequest)
    assert (sent[0]._group, sent[0]._member_id) == ("g", "m-1")
    assert (coordinator.generation, coordinator.member_id) == (-1, "")


async def test_past_generation_0_aiokafka_leaves_as_before() -> None:
    sent: list[Any] = []
    coordinator = _coordinator(3, sent)
    leave_on_stop(SimpleNamespace(_coordinator=coordinator))  # type: ignore[arg-type]
    await coordinator._maybe_leave_group()
    assert sent == ["aiokafka's leave"]


async def test_a_leave_the_broker_does_not_answer_is_logged_and_the_stop_goes_on(caplog) -> None:
    coordinator = _coordinator(0, [], fails=True)
    leave_on_stop(SimpleNamespace(_coordinator=coordinator))  # type: ignore[arg-type]
    await coordinator._maybe_leave_group()
    assert "waits for its session timeout" in caplog.text
    assert coordinator.member_id == ""


def test_a_consumer_in_no_group_or_not_started_is_left_alone() -> None:
    leave_on_stop(SimpleNamespace(_coordinator=None))  # type: ignore[arg-type]
    leave_on_stop(SimpleNamespace(_coordinator=SimpleNamespace()))  # type: ignore[arg-type]  # NoGroupCoordinator
