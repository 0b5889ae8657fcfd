"""The LLM role client's binding of :mod:`combee_core.control.concurrency`: a gate per (model, role) whose width is the
controller's current limit.

Each role's calls to a model adapt on their own latency (a reflector call and a reducer call take different times);
a rate-limit answer or a timeout from a model backs off every role calling it (:meth:`ConcurrencyGates.overloaded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from combee_core.control.concurrency import AimdConfig, ConcurrencyController

log = logging.getLogger(__name__)


@dataclass
class _Gate:
    controller: ConcurrencyController
    loop: asyncio.AbstractEventLoop
    in_flight: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


class ConcurrencyGates:
    """One gate per (model, role): ``async with gates.slot(model, role) as report`` runs one call."""

    def __init__(self, config: Callable[[Any], AimdConfig], clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        """The tuning of a role's gates (its start value and ceiling)."""
        self._clock = clock
        self._gates: dict[tuple[str, str], _Gate] = {}

    def _gate(self, model: str, role: str) -> _Gate:
        loop = asyncio.get_running_loop()
        gate = self._gates.get((model, role))
        if gate is None or gate.loop is not loop:  # a new event loop (tests, a restarted worker): a new condition
            controller = gate.controller if gate is not None else ConcurrencyController(self.config(role))
            gate = _Gate(controller, loop)
            self._gates[(model, role)] = gate
        return gate

    def limit(self, model: str, role: str) -> int:
        """The current limit of ``role``'s calls to ``model`` (the initial one before any call)."""
        gate = self._gates.get((model, role))
        return gate.controller.limit if gate is not None else ConcurrencyController(self.config(role)).limit

    def limits(self) -> dict[tuple[str, str], int]:
        return {key: gate.controller.limit for key, gate in self._gates.items()}

    @contextlib.asynccontextmanager
    async def slot(self, model: str, role: str) -> AsyncIterator[Callable[[float], None]]:
        """Wait for a free slot (and any ``Retry-After``), run the call; call the yielded function with the call's
        latency when it succeeded."""
        gate = self._gate(model, role)
        async with gate.changed:
            while True:
                wait = gate.controller.wait_s(self._clock())
                if wait <= 0 and gate.in_flight < gate.controller.limit:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gate.changed.wait(), wait if wait > 0 else None)
            gate.in_flight += 1
        in_flight = gate.in_flight

        def succeeded(latency_s: float) -> None:
            before = gate.controller.limit
            gate.controller.on_success(latency_s, in_flight)
            if gate.controller.limit != before:
                log.info("%s calls to %s: concurrency %d -> %d (%s)", role, model, before, gate.controller.limit,
                         gate.controller.last_reason)

        try:
            yield succeeded
        finally:
            async with gate.changed:
                gate.in_flight -= 1
                gate.changed.notify_all()

    def overloaded(self, model: str, reason: str, retry_after_s: float | None = None) -> None:
        """The model answered 429 or timed out: every role calling it backs off."""
        now = self._clock()
        for (gate_model, role), gate in self._gates.items():
            if gate_model == model and gate.controller.on_overload(now, reason, retry_after_s):
                log.warning("%s calls to %s: %s", role, model, gate.controller.last_reason)
