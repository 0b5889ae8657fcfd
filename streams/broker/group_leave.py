"""A stopped consumer leaves its group at every generation, Tansu's first (0) included.

aiokafka's ``consumer.stop()`` sends a LeaveGroup only when the member's generation is above 0 (a test it took from
the Kafka broker, whose first generation is 1). Tansu numbers a group's first generation 0, so a member of a group
that never rebalanced left nothing behind but its session: Tansu kept it until its session timeout ran out, and a
worker started in the same groups waited for that before it was assigned (seen: 11.3 s for a restarted pipeline
against 3.1 s for a fresh one). Tansu honours a LeaveGroup (it removes the member and starts a new generation at
once). :func:`leave_on_stop` makes a consumer's stop send it at generation 0 too, and when the member has an id but
no generation yet (a stop during its join); past 0 aiokafka's own leave runs unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.group import LeaveGroupRequest

__all__ = ["leave_on_stop", "needs_own_leave"]

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""


def needs_own_leave(generation: int, member_id: str, group_instance_id: str | None) -> bool:
    """True when aiokafka's stop would not send a LeaveGroup though the broker knows the member: a dynamic member
    with an id whose generation is 0 or not yet given (aiokafka leaves only past 0; a static member never leaves)."""
    return generation <= 0 and member_id != UNKNOWN_MEMBER_ID and group_instance_id is None


def leave_on_stop(consumer: AIOKafkaConsumer) -> None:
    """Make ``consumer``'s stop leave its group whatever its generation (call before ``stop``; idempotent)."""
    coordinator: Any = getattr(consumer, "_coordinator", None)
    if not isinstance(coordinator, GroupCoordinator) or getattr(coordinator, "_leaves_at_any_generation", False):
        return  # not started, or in no group (a reader's NoGroupCoordinator), or done already
    aiokafka_leave = coordinator._maybe_leave_group

    async def leave() -> None:
        if not needs_own_leave(coordinator.generation, coordinator.member_id, coordinator._group_instance_id):
            await aiokafka_leave()
            return
        try:
            response = await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))
        except KafkaError as error:  # a best effort, as aiokafka's: the member's session ends it otherwise
            log.warning("%s: the LeaveGroup of member %s failed (%s); the group waits for its session timeout",
                        coordinator.group_id, coordinator.member_id, error)
        else:
            code = getattr(response, "error_code", 0)
            if code:
                log.info("%s: LeaveGroup of member %s answered %s", coordinator.group_id, coordinator.member_id,
                         for_code(code).__name__)
            else:
                log.debug("%s: member %s left the group (generation %d)", coordinator.group_id,
                          coordinator.member_id, coordinator.generation)
        coordinator.reset_generation()

    coordinator._maybe_leave_group = leave  # close() and maybe_leave_group() both call it
    coordinator._leaves_at_any_generation = True
