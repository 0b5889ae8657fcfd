"""A ``combee-sim/...`` call answered in this process, without litellm.

The simulator is not a provider: nothing crosses a network, so ``LLMRoles`` answers its calls here and a process
whose roles all run on the simulator never imports litellm (seconds of CPU at every start, issue 43). The answer
is the one the simulator's litellm provider (:mod:`combee_core.llm.provider`) gives, from the same
:func:`~combee_core.llm.simulator.simulate`: the same text, tokens, price and modelled latency; the same sleep in
``real`` mode; the same failures (an injected 503 is retryable, a modelled latency over the timeout is an overload,
messages the simulator cannot read are not retried).

A simulated call still goes through litellm when :func:`litellm_callbacks_watch` says litellm is loaded with a
callback configured (a Langfuse or OpenTelemetry logger then sees every call, as it did), or when ``LLMRoles`` is
asked to (``sim_through_litellm``: the benchmarks that measure litellm's own cost).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from combee_core.llm.errors import LLMCallError
from combee_core.llm.simulator import (
    INPUT_COST_PER_TOKEN,
    OUTPUT_COST_PER_TOKEN,
    SimulatedFailure,
    SimulatedReply,
    SimulatorConfig,
    simulate,
)


def sim_cost(prompt_tokens: int, completion_tokens: int) -> float:
    """USD price of a simulated call: litellm's generic per-token formula with the simulator's prices."""
    return prompt_tokens * INPUT_COST_PER_TOKEN + completion_tokens * OUTPUT_COST_PER_TOKEN


@dataclass(frozen=True)
class SimulatedAnswer:
    """One answered simulated call: the simulator's reply and the wall seconds the call took."""

    reply: SimulatedReply
    wall_s: float
    mode: str

    @property
    def latency_s(self) -> float:
        """What the call record counts: the modelled latency in ``virtual`` mode, the measured wall time in ``real``
        mode (as the roles count a provider's answer)."""
        return self.reply.latency_s if self.mode == "virtual" else self.wall_s


async def answer_simulated(role: str, model: str, messages: Sequence[dict[str, Any]], config: SimulatorConfig,
                           attempt: int, timeout_s: float | None) -> SimulatedAnswer:
    """Answer one attempt of a simulated call; in ``real`` mode after sleeping its modelled latency (at most
    ``timeout_s``). Raises :class:`LLMCallError` as the roles' retry loop expects it."""
    started = time.perf_counter()
    try:
        reply = simulate(messages, config, attempt)
    except SimulatedFailure as error:
        raise LLMCallError(role, model, f"ServiceUnavailableError: combee-sim (503): {error}") from error
    except ValueError as error:
        raise LLMCallError(role, model, f"BadRequestError: combee-sim cannot answer: {error}",
                           retryable=False) from error
    if config.mode == "real":
        await asyncio.sleep(reply.latency_s if timeout_s is None else min(reply.latency_s, timeout_s))
    if timeout_s is not None and reply.latency_s > timeout_s:
        raise LLMCallError(role, model, f"Timeout: combee-sim: modelled latency {reply.latency_s:.3f}s exceeds the "
                           f"timeout {timeout_s}s", overload=True)
    return SimulatedAnswer(reply, time.perf_counter() - started, config.mode)


LITELLM_CALLBACK_LISTS = ("callbacks", "input_callback", "success_callback", "failure_callback", "service_callback",
                          "_async_input_callback", "_async_success_callback", "_async_failure_callback")
"""litellm's module-level lists of logging callbacks (Langfuse, OpenTelemetry, a ``CustomLogger``...)."""


def litellm_callbacks_configured(litellm: Any) -> bool:
    """Whether anyone registered a logging callback with the loaded ``litellm`` module."""
    return any(getattr(litellm, name, None) for name in LITELLM_CALLBACK_LISTS)


def litellm_callbacks_watch() -> bool:
    """Whether litellm is loaded in this process with a logging callback configured (then simulated calls go
    through it too, so the callback sees every call). Never imports litellm itself."""
    litellm = sys.modules.get("litellm")
    return litellm is not None and litellm_callbacks_configured(litellm)
