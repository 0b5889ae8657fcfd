"""Roles configured as ``openai/<alias>`` + ``llm_api_base`` go through litellm's OpenAI path to any compatible server.

A tiny local HTTP server stands in for llama.cpp / vLLM: it records what it was sent and answers with scripted
texts or statuses, so key, max_tokens, usage, retries and error classes are checked without a model.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from combee_core.llm.config import LLMConfig
from combee_core.llm.errors import LLMCallError, LLMError, LLMOutputError
from combee_core.llm.roles import LLMRoles
from combee_core.models import CallRecord, Reflection, Trace
from combee_core.settings import CombeeSettings


class FakeOpenAIServer:
    """Answers POST /v1/chat/completions with the next scripted (status, text); records each request."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str]] = []
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.statuses: list[int] = []
        self.answer: Callable[[dict], str] | None = None
        """Answers a request body when the script is empty (default: no insights)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if server.script:
                    status, text = server.script.pop(0)
                else:
                    status, text = 200, server.answer(body) if server.answer else '{"insights": []}'
                server.statuses.append(status)
                if status == 200:
                    payload = {
                        "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333},
                    }
                else:
                    payload = {"error": {"message": text, "type": "server_error", "code": status}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def roles_for(server: FakeOpenAIServer, on_call: Callable[[CallRecord], None] | None = None,
              **overrides: object) -> LLMRoles:
    values: dict[str, object] = dict(
        reflector_model="openai/tiny", aggregator_model="openai/tiny", reducer_model="openai/tiny",
        llm_api_base=server.api_base, llm_api_key="local-no-key", llm_max_tokens=64, llm_max_retries=1,
        llm_timeout_s=10,
    )
    values.update(overrides)
    config = LLMConfig.from_settings(CombeeSettings.load(env={}, **values))
    config = config.model_copy(update={"reflector": config.reflector.model_copy(update={"backoff_s": 0.001})})
    return LLMRoles(config, on_call=on_call)


def trace() -> Trace:
    return Trace(trace_id="t-1", playbook_id="pb", playbook_version=0, agent_id="a1", task_id="task", input="2+2",
                 output="5", feedback="wrong", score=0.0, success=False,
                 created_at=datetime(2026, 1, 1, tzinfo=timezone.utc))


async def test_settings_reach_the_server_and_usage_comes_back(server):
    server.script = [(200, '```json\n{"insights": [{"section": "Arithmetic", "content": "Add carefully",}]}\n```')]
    reflection = await roles_for(server).reflect(trace())
    assert isinstance(reflection, Reflection)
    assert [(i.section, i.content) for i in reflection.insights] == [("arithmetic", "Add carefully")]
    sent = server.requests[0]
    assert sent["model"] == "tiny" and sent["max_tokens"] == 64 and sent["temperature"] == 0.0
    assert server.headers[0]["authorization"] == "Bearer local-no-key"
    assert reflection.usage.prompt_tokens == 321 and reflection.usage.completion_tokens == 12
    assert reflection.usage.calls == 1 and reflection.usage.cost_usd == 0.0  # no price for a local model


async def test_server_error_is_retried_then_answered(server):
    server.script = [(500, "overloaded"), (200, '{"insights": [], "entry_tags": []}')]
    reflection = await roles_for(server).reflect(trace())
    assert reflection.insights == [] and len(server.requests) == 2


async def test_every_request_the_server_sees_is_one_recorded_and_costed_attempt(server):
    """Half the requests fail (500, 503, 429 in turn). Only our loop retries, so the server's count of requests
    equals the attempts recorded, and every answered request is costed (a priced model name)."""
    ok = '{"insights": [], "entry_tags": []}'
    server.script = [item for i in range(200) for item in (((500, 503, 429)[i % 3], "busy"), (200, ok))]
    records: list[CallRecord] = []
    roles = roles_for(server, on_call=records.append, reflector_model="openai/gpt-4o-mini", llm_max_retries=4)
    results = await asyncio.gather(*(roles.reflect(trace()) for _ in range(30)), return_exceptions=True)

    assert all(isinstance(r, (Reflection, LLMError)) for r in results)
    assert len(server.requests) == len(records) >= 30
    assert sum(r.error is not None for r in records) == sum(s != 200 for s in server.statuses)
    answered = [r for r in records if r.error is None]
    from combee_core.llm import provider  # litellm as the provider imports it (after its offline price-map switch)

    price = sum(provider.litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=321, completion_tokens=12))
    assert price > 0 and all(r.usage.cost_usd == pytest.approx(price) for r in answered)
    assert sum(r.usage.cost_usd for r in records) == pytest.approx(price * len(answered))


async def test_prompt_over_the_context_is_a_non_retryable_call_error(server):
    server.script = [(400, "Requested tokens (5000) exceed context window of 4096")]
    with pytest.raises(LLMCallError, match="exceed context window") as caught:
        await roles_for(server).reflect(trace())
    assert caught.value.retryable is False and len(server.requests) == 1


async def test_unusable_text_is_re_asked_then_an_output_error_with_the_raw_text(server):
    server.script = [(200, "I think the agent should add better."), (200, "Sure! Here is the answer: insights")]
    with pytest.raises(LLMOutputError, match="no JSON object") as caught:
        await roles_for(server).reflect(trace())
    assert caught.value.attempts == 2 and "insights" in caught.value.raw_preview


async def test_no_key_for_an_openai_compatible_server_fails_with_a_clear_reason(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMCallError, match="api_key"):
        await roles_for(server, llm_api_key=None, llm_max_retries=0).reflect(trace())
    assert server.requests == []


async def test_a_model_without_a_price_is_warned_about_once(server, caplog):
    roles = roles_for(server)
    with caplog.at_level("WARNING", logger="combee_core.llm.roles"):
        for _ in range(3):
            await roles.reflect(trace())
    assert len(server.requests) == 3
    assert sum("no cost for model 'tiny'" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    "kind, expected_type",
    [("json_object", "json_object"), ("json_schema", "json_schema"), ("llama_cpp_schema", "json_object")],
)
async def test_response_format_asks_for_json_and_the_role_schema(server, kind, expected_type):
    server.script = [(200, '{"insights": [], "entry_tags": []}'), (200, '{"operations": []}')]
    roles = roles_for(server, llm_response_format=kind)
    await roles.aggregate([await roles.reflect(trace())])
    reflect_format, aggregate_format = server.requests[0]["response_format"], server.requests[1]["response_format"]
    assert reflect_format["type"] == aggregate_format["type"] == expected_type
    if kind == "llama_cpp_schema":
        assert set(reflect_format["schema"]["properties"]) == {"diagnosis", "insights", "entry_tags"}
        assert set(aggregate_format["schema"]["properties"]) == {"operations"}
    if kind == "json_schema":
        assert reflect_format["json_schema"]["name"] == "reflect_answer"
        assert set(reflect_format["json_schema"]["schema"]["properties"]) == {"diagnosis", "insights", "entry_tags"}


async def test_text_mode_sends_no_response_format(server):
    await roles_for(server).reflect(trace())
    assert "response_format" not in server.requests[0]
