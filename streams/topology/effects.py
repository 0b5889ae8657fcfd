"""Perform a processor's effects (``combee_core.processors.effects``) for a stage, in order.

Tokens are the stage's consumed records. A numbered publish goes through ``numbered`` (the stage writes it through
its live view of the log and says whether it counts and the stage may go on); when it does not, the effects after
it are skipped. Records published are flushed before inputs are acknowledged (``streams.topology.commit_order``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiokafka.structs import ConsumerRecord

from combee_core.processors.effects import Acknowledge, Count, Effect, Publish, Reject
from streams.topology.commit_order import acknowledge
from streams.topology.dead_letters import make_dead_letter

if TYPE_CHECKING:
    from streams.topology.runtime import Stage


def _record(token: object) -> ConsumerRecord:
    assert isinstance(token, ConsumerRecord), f"a stage's tokens are its consumed records, not {type(token)}"
    return token


async def perform(stage: Stage, effects: Iterable[Effect],
                  numbered: Callable[[Publish], Awaitable[bool]] | None = None) -> bool:
    """Perform ``effects``; False when a numbered publish did not count and the rest were skipped."""
    unflushed = False
    for effect in effects:
        if isinstance(effect, Publish):
            if effect.number is None:
                await stage.ctx.send(effect.topic, effect.key, effect.value, headers=effect.headers)
                unflushed = True
            else:
                assert numbered is not None, f"{stage.name} cannot confirm a numbered record on {effect.topic}"
                if not await numbered(effect):
                    return False
        elif isinstance(effect, Acknowledge):
            await acknowledge(stage, [_record(token) for token in effect.tokens], unflushed=unflushed)
            unflushed = False
        elif isinstance(effect, Reject):
            if effect.token is None:
                await stage.ctx.dead_letter(make_dead_letter(
                    stage.name, effect.reason, effect.error_type, b"", trace_id=effect.trace_id,
                    playbook_id=effect.playbook_id))
            else:
                await stage.reject(_record(effect.token), effect.reason, effect.error_type,
                                   trace_id=effect.trace_id, playbook_id=effect.playbook_id)
        elif isinstance(effect, Count):
            stage.ctx.count(effect.name, effect.amount)
    if unflushed:
        await stage.ctx.flush()
    return True
