"""A ``combee worker`` (every stage) whose LLM roles answer from the simulator directly, not through litellm.

    python -m bench.direct_worker        # settings from the COMBEE_* environment, as `combee worker`

For ``python -m bench.throughput --without-litellm`` only: it measured what everything but litellm costs in a real
worker (stages, Kafka, roles, call records, the simulator) when simulated calls went through litellm. Since issue 43
``combee worker`` answers simulated calls in-process too (``combee_core.llm.sim_calls``), so both runs now measure
the same path; kept so that the earlier figures can be re-run. The roles get a ``responder`` (the hook replay
answers through) that calls
:func:`~combee_core.llm.simulator.simulate` with the run's simulator settings and prices the answer as the
simulator's litellm provider does; every call is still recorded on ``llm-calls``.
"""

from __future__ import annotations

from typing import Any

import streams.topology.worker
from combee_core.llm.config import LLMConfig
from combee_core.llm.roles import LLMReply, LLMRequest
from combee_core.llm.sim_calls import sim_cost
from combee_core.llm.simulator import simulate
from combee_core.models import Usage
from combee_core.settings import CombeeSettings
from streams.topology import llm_setup


def simulator_responder(settings: CombeeSettings) -> Any:
    """A responder answering every call with the simulator (the run's simulator settings), priced as its provider."""
    simulator = LLMConfig.from_settings(settings).simulator

    async def respond(request: LLMRequest) -> LLMReply:
        reply = simulate(request.messages, simulator, request.attempt)
        usage = Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                      cost_usd=round(sim_cost(reply.prompt_tokens, reply.completion_tokens), 12), calls=1)
        return LLMReply(reply.text, usage, reply.latency_s, reply.latency_s)

    return respond


def build_roles_without_litellm(settings: CombeeSettings, *, producer_ctx: Any = None, on_call: Any = None,
                                responder: Any = None) -> Any:
    return llm_setup.build_llm_roles(settings, producer_ctx=producer_ctx, on_call=on_call,
                                     responder=responder or simulator_responder(settings))


def main() -> int:
    from streams.cli import main as combee

    streams.topology.worker.build_llm_roles = build_roles_without_litellm
    return combee(["worker"])


if __name__ == "__main__":
    raise SystemExit(main())
