"""The simulator as a litellm custom provider (``combee-sim/<anything>``), and its explicit registration.

litellm keeps custom providers and model prices in module-level tables (``litellm.custom_provider_map``,
``litellm.model_cost``), so registration is global to the process; :func:`register_offline_providers` does it,
idempotently, and only when called (importing this module registers nothing). The handler itself is stateless:
the :class:`~combee_core.llm.simulator.SimulatorConfig` and the attempt number arrive with each call as the
``combee_sim`` keyword of ``litellm.acompletion`` (litellm passes unknown keywords to a custom provider in
``optional_params``).

Importing this module imports litellm (offline: the bundled price map is used, see ``LITELLM_LOCAL_MODEL_COST_MAP``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # bundled price map: no network at import

import litellm as litellm  # after the offline switch above; re-exported for roles.py
from litellm.llms.custom_llm import CustomLLM, CustomLLMError
from litellm.types.utils import Usage as LitellmUsage

if "LITELLM_LOG" not in os.environ:  # litellm logs two INFO lines per call; every attempt is already a CallRecord
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)

try:  # litellm's marker for its own nested calls: no success/failure logging payload, no callbacks
    from litellm._internal_context import is_internal_call as _litellm_internal_call
except ImportError:  # another litellm layout: its logging then simply runs
    _litellm_internal_call = None  # type: ignore[misc,assignment]

from combee_core.llm.sim_calls import litellm_callbacks_configured, sim_cost
from combee_core.llm.simulator import (
    DEFAULT_MODEL,
    HIDDEN_PARAM,
    INPUT_COST_PER_TOKEN,
    OUTPUT_COST_PER_TOKEN,
    PROVIDER,
    SIM_PARAM,
    SimulatedFailure,
    SimulatedReply,
    SimulatorConfig,
    is_sim_model,
    simulate,
)

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def _price_entry() -> dict[str, Any]:
    return {
        "input_cost_per_token": INPUT_COST_PER_TOKEN,
        "output_cost_per_token": OUTPUT_COST_PER_TOKEN,
        # stated explicitly so litellm does not warn that it defaults them to 0
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
        "litellm_provider": PROVIDER,
        "mode": "chat",
    }


def register_offline_providers(models: Iterable[str] = ()) -> None:
    """Register the ``combee-sim`` provider with litellm and the prices of ``combee-sim/default`` and of every
    ``combee-sim/...`` name in ``models`` (so ``litellm.completion_cost`` works for them). Idempotent.

    Also sets ``litellm.suppress_debug_info`` so provider errors do not print help banners to stdout.
    """
    litellm.suppress_debug_info = True
    with _lock:
        if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": CombeeSimProvider()})
        to_price = [m for m in dict.fromkeys([DEFAULT_MODEL, *models]) if is_sim_model(m)]
        missing = {m: _price_entry() for m in to_price if m not in litellm.model_cost}
        if missing:
            litellm.register_model(missing)


@contextlib.contextmanager
def litellm_logging_skipped() -> Iterator[None]:
    """Within this block, ``litellm.acompletion`` skips its per-call logging (the standard logging payload, built
    for callbacks on every call, ~0.3 ms of CPU) when no litellm callback is configured: ``LLMRoles`` records every
    call itself (``CallRecord``). The response is still priced (``_hidden_params["response_cost"]``). With a
    callback configured, nothing changes. Uses litellm's own marker for its nested calls (a private module; when it
    is absent, logging runs as before). Tasks created inside the block keep the setting."""
    if _litellm_internal_call is None or litellm_callbacks_configured(litellm):
        yield
        return
    token = _litellm_internal_call.set(True)
    try:
        yield
    finally:
        _litellm_internal_call.reset(token)


def _sim_request(optional_params: dict[str, Any] | None) -> tuple[SimulatorConfig, int]:
    optional = optional_params or {}
    request = optional.get(SIM_PARAM)
    if request is None:
        request = (optional.get("extra_body") or {}).get(SIM_PARAM)
    request = request or {}
    return SimulatorConfig.model_validate(request.get("config") or {}), int(request.get("attempt", 1))


def _timeout_s(timeout: Any) -> float | None:
    if isinstance(timeout, (int, float)):
        return float(timeout)
    read = getattr(timeout, "read", None)  # httpx.Timeout
    return float(read) if isinstance(read, (int, float)) else None


class _Call:
    """One simulated call, shared by the sync and async entry points."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.model = str(kwargs.get("model", "default"))
        self.messages = kwargs.get("messages") or []
        self.model_response = kwargs["model_response"]
        self.config, self.attempt = _sim_request(kwargs.get("optional_params"))
        self.timeout = _timeout_s(kwargs.get("timeout"))

    def reply(self) -> SimulatedReply:
        try:
            return simulate(self.messages, self.config, self.attempt)
        except SimulatedFailure as error:
            raise CustomLLMError(status_code=503, message=str(error)) from error  # type: ignore[no-untyped-call]
        except ValueError as error:
            raise CustomLLMError(  # type: ignore[no-untyped-call]
                status_code=400, message=f"combee-sim cannot answer: {error}") from error

    def sleep_s(self, reply: SimulatedReply) -> float:
        if self.config.mode != "real":
            return 0.0
        return reply.latency_s if self.timeout is None else min(reply.latency_s, self.timeout)

    def finish(self, reply: SimulatedReply) -> Any:
        if self.timeout is not None and reply.latency_s > self.timeout:
            raise litellm.exceptions.Timeout(
                message=f"combee-sim: modelled latency {reply.latency_s:.3f}s exceeds the timeout {self.timeout}s",
                model=self.model,
                llm_provider=PROVIDER,
            )
        response = self.model_response
        response.choices[0].message.content = reply.text
        response.choices[0].finish_reason = "stop"
        response.model = self.model
        response.usage = LitellmUsage(
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            total_tokens=reply.prompt_tokens + reply.completion_tokens,
        )
        # The provider prices its own answer, as a hosted API that reports cost does: litellm then reuses this
        # figure (``response_cost``) instead of looking the model up in its price map on every call, and
        # ``LLMRoles`` records it. Same prices as the ``register_model`` entry above (``_price_entry``).
        response._hidden_params["response_cost"] = sim_cost(reply.prompt_tokens, reply.completion_tokens)
        response._hidden_params[HIDDEN_PARAM] = {
            "latency_s": reply.latency_s,
            "unscaled_latency_s": reply.unscaled_latency_s,
            "mode": self.config.mode,
            "time_scale": self.config.time_scale,
        }
        return response


class CombeeSimProvider(CustomLLM):
    """litellm ``CustomLLM`` answering with :func:`~combee_core.llm.simulator.simulate`. Stateless: everything it
    needs comes with the call (messages, ``combee_sim`` config and attempt, timeout)."""

    def completion(self, *args: Any, **kwargs: Any) -> Any:
        call = _Call(kwargs)
        reply = call.reply()
        if call.sleep_s(reply) > 0:
            time.sleep(call.sleep_s(reply))
        return call.finish(reply)

    async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
        call = _Call(kwargs)
        reply = call.reply()
        if call.sleep_s(reply) > 0:
            await asyncio.sleep(call.sleep_s(reply))
        return call.finish(reply)
