"""What one LLM call costs the CPU through our client: litellm with the simulator, litellm's fixed cost per call (an
instant custom provider), litellm's OpenAI path to a stub server, and the same calls answered without litellm.
Used by ``bench.throughput`` (its "LLM client" line), ``bench.profile_worker`` and ``bench.litellm_call_shape``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from combee_core.models import Trace
from combee_core.settings import CombeeSettings

STUB_OPENAI_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
BODY = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": '{"insights": [], "entry_tags": []}'}}],
                   "usage": {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312}}).encode()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"""
"""An OpenAI-compatible server answering every chat completion at once (run in its own process)."""


INSTANT_PROVIDER = "combee-instant"
INSTANT_TEXT = '{"insights": [], "entry_tags": []}'
INSTANT_USAGE = (300, 12)
"""The instant provider's answer to every call: no insight, 300 prompt and 12 completion tokens."""


def register_instant_provider() -> None:
    """Register (in this process) a litellm custom provider that answers every call at once with ``INSTANT_TEXT``
    and states its price, as the simulator does: what remains of a call through it is litellm's fixed cost."""
    import litellm
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import Usage as LitellmUsage

    from combee_core.llm.sim_calls import sim_cost

    class InstantProvider(CustomLLM):
        def _answer(self, kwargs: dict) -> object:
            response = kwargs["model_response"]
            response.choices[0].message.content = INSTANT_TEXT
            response.choices[0].finish_reason = "stop"
            response.model = str(kwargs.get("model"))
            response.usage = LitellmUsage(prompt_tokens=INSTANT_USAGE[0], completion_tokens=INSTANT_USAGE[1],
                                          total_tokens=sum(INSTANT_USAGE))
            response._hidden_params["response_cost"] = sim_cost(*INSTANT_USAGE)
            return response

        def completion(self, *args, **kwargs):
            return self._answer(kwargs)

        async def acompletion(self, *args, **kwargs):
            return self._answer(kwargs)

    if not any(item.get("provider") == INSTANT_PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": INSTANT_PROVIDER, "custom_handler": InstantProvider()})
        from combee_core.llm.simulator import INPUT_COST_PER_TOKEN, OUTPUT_COST_PER_TOKEN

        litellm.register_model({f"{INSTANT_PROVIDER}/answer": {
            "input_cost_per_token": INPUT_COST_PER_TOKEN, "output_cost_per_token": OUTPUT_COST_PER_TOKEN,
            "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0,
            "litellm_provider": INSTANT_PROVIDER, "mode": "chat"}})


def client_cpu_per_call(settings: CombeeSettings, traces: list[Trace], calls: int = 300, rounds: int = 5) -> dict:
    """CPU ms per reflector call through ``LLMRoles``: through litellm (the simulator as its custom provider; an
    instant provider that answers at once; litellm's OpenAI path to a stub server in another process, i.e. litellm
    + the openai SDK + HTTP), and through a responder answering directly (the simulator; the instant answer): no
    client at all. litellm's fixed cost per call = instant through litellm - instant answered directly."""
    from combee_core.llm.config import LLMConfig, RoleConfig
    from combee_core.llm.roles import LLMReply, LLMRoles
    from combee_core.llm.sim_calls import sim_cost
    from combee_core.llm.simulator import simulate
    from combee_core.models import Usage

    config = LLMConfig.from_settings(settings)
    register_instant_provider()
    instant = config.model_copy(update={"reflector": RoleConfig(model=f"{INSTANT_PROVIDER}/answer", max_retries=0)})

    async def direct(request) -> LLMReply:
        reply = simulate(request.messages, config.simulator, request.attempt)
        cost = round(sim_cost(reply.prompt_tokens, reply.completion_tokens), 12)
        usage = Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens, cost_usd=cost,
                      calls=1)
        return LLMReply(reply.text, usage, reply.latency_s, reply.latency_s)

    async def direct_instant(request) -> LLMReply:
        usage = Usage(prompt_tokens=INSTANT_USAGE[0], completion_tokens=INSTANT_USAGE[1],
                      cost_usd=round(sim_cost(*INSTANT_USAGE), 12), calls=1)
        return LLMReply(INSTANT_TEXT, usage, 0.0, None)

    stub = subprocess.Popen([sys.executable, "-c", STUB_OPENAI_SERVER], stdout=subprocess.PIPE, text=True)
    assert stub.stdout is not None
    port = int(stub.stdout.readline())
    http = RoleConfig(model="openai/gpt-4o-mini", api_base=f"http://127.0.0.1:{port}/v1", api_key="sk-local-stub",
                      max_retries=0)
    records: list[bytes] = []

    def record(call) -> None:
        records.append(call.model_dump_json().encode())

    paths = {"litellm": LLMRoles(config, on_call=record, sim_through_litellm=True),
             "litellm_http": LLMRoles(config.model_copy(update={"reflector": http}), on_call=record),
             "direct": LLMRoles(config, on_call=record, responder=direct),
             "litellm_instant": LLMRoles(instant, on_call=record),
             "direct_instant": LLMRoles(instant, on_call=record, responder=direct_instant)}
    assert len(traces) >= calls * rounds + 50, "calls x rounds traces, plus 50 to warm up"

    async def reflect_all(roles, chunk) -> None:
        await asyncio.gather(*(roles.reflect(t) for t in chunk))

    per_call: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for roles in paths.values():
            asyncio.run(reflect_all(roles, traces[-50:]))  # first calls: lazy imports
        for index in range(rounds):
            chunk = traces[index * calls:(index + 1) * calls]
            for name, roles in paths.items():
                records.clear()
                started = time.process_time()
                asyncio.run(reflect_all(roles, chunk))
                per_call[name].append(1000 * (time.process_time() - started) / calls)
    finally:
        stub.terminate()
        stub.wait(10)
    median = {name: sorted(values)[len(values) // 2] for name, values in per_call.items()}
    return dict(litellm_ms_per_call=round(median["litellm"], 3), direct_ms_per_call=round(median["direct"], 3),
                client_ms_per_call=round(median["litellm"] - median["direct"], 3),
                litellm_http_ms_per_call=round(median["litellm_http"], 3),
                litellm_instant_ms_per_call=round(median["litellm_instant"], 3),
                direct_instant_ms_per_call=round(median["direct_instant"], 3),
                litellm_floor_ms_per_call=round(median["litellm_instant"] - median["direct_instant"], 3),
                per_round={name: [round(v, 3) for v in values] for name, values in per_call.items()},
                calls=calls, rounds=rounds)
