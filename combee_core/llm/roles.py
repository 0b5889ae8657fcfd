"""The three LLM roles (reflector, aggregator, reducer) behind one object per worker: the call loop they share. Each
role's prompt and what its answer becomes is its own file (``reflector_role.py``, ``aggregator_role.py``,
``reducer_role.py``).

Every call goes through ``litellm.acompletion`` (a ``combee-sim/...`` model's in this process, without litellm:
:mod:`combee_core.llm.sim_calls`; for replay, an injected ``responder``), is retried with
exponential backoff on provider errors and on unparseable output, and is recorded as a :class:`CallRecord`
(key, messages, params, response text, usage and cost, latency) handed to ``on_call``. This loop is the only retry
layer: litellm's and the provider client's own retries are switched off (:data:`NO_PROVIDER_RETRIES`), so every
request a server receives is one recorded attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from combee_core.llm import prompts
from combee_core.llm.aggregator_role import aggregator_messages
from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMCallError, LLMError, LLMOutputError, PromptTooLarge
from combee_core.llm.gates import ConcurrencyGates
from combee_core.llm.parsing import parse_operations_output, parse_reflection_output
from combee_core.llm.provider_errors import provider_errors, retry_after_s
from combee_core.llm.reducer_role import reducer_messages
from combee_core.llm.reflector_role import reflection_from, reflector_messages
from combee_core.llm.sim_calls import answer_simulated, litellm_callbacks_watch, sim_cost
from combee_core.llm.simulator import HIDDEN_PARAM, SIM_PARAM, is_sim_model
from combee_core.models import CallRecord, Operation, Reflection, Role, Trace, Usage

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

NO_PROVIDER_RETRIES: dict[str, int] = {"num_retries": 0, "max_retries": 0}
"""Sent with every ``litellm.acompletion``: litellm's retry wrapper (``num_retries``) and the provider SDK's client
(``max_retries``: the openai client retries 429, 5xx and connection errors twice by default) must not retry beneath
our loop, or the server sees requests that no :class:`CallRecord` (and no cost) accounts for."""

_TIMEOUT_GRACE = 1.25
"""Our own deadline is the role timeout times this (plus 1 s): a safety net if a provider ignores ``timeout``."""


@dataclass(frozen=True)
class RoleResult:
    """Operations proposed by an aggregator or reducer call, with what it took (all attempts)."""

    operations: list[Operation]
    usage: Usage
    latency_s: float
    records: list[CallRecord]
    model: str
    dropped_items: int = 0


@dataclass(frozen=True)
class LLMRequest:
    """What a ``responder`` is asked (replay answers it from recorded calls)."""

    role: Role
    model: str
    key: str
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    attempt: int


@dataclass(frozen=True)
class LLMReply:
    """What a ``responder`` answers. Raise ``LLMCallError`` to report a failed call."""

    text: str
    usage: Usage = field(default_factory=lambda: Usage(calls=1))
    latency_s: float = 0.0
    modelled_latency_s: float | None = None


Responder = Callable[[LLMRequest], Awaitable[LLMReply]]
OnCall = Callable[[CallRecord], Awaitable[None] | None]


def call_key(model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any]) -> str:
    """Stable identity of a call: sha256 of sorted-key JSON of model, messages and params."""
    payload = {"model": model, "messages": list(messages), "params": params}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def register_offline_providers(models: Sequence[str] = ()) -> None:
    """Register the offline ``combee-sim`` provider and its prices with litellm (idempotent, explicit)."""
    from combee_core.llm.provider import register_offline_providers as register

    register(models)


class _Attempted(Exception):
    """Internal: an attempt failed in a way another attempt may fix."""

    def __init__(self, error: LLMError) -> None:
        self.error = error


class LLMRoles:
    """The reflector, aggregator and reducer of one worker. No globals: two instances never share state.

    ``on_call`` receives a :class:`CallRecord` for every attempt (sync or async callable). ``responder``, when
    given, answers calls instead of litellm (replay); litellm is then neither imported nor registered. Without one,
    litellm is imported when the roles are created if a role calls a provider; a role on the simulator
    (``combee-sim/...``) is answered in this process (:mod:`combee_core.llm.sim_calls`), unless litellm is loaded
    with a callback configured or ``sim_through_litellm`` is set (the benchmarks of litellm's own cost): then
    through litellm's ``combee-sim`` provider, with the same answers.
    """

    def __init__(
        self,
        config: LLMConfig | None = None,
        on_call: OnCall | None = None,
        responder: Responder | None = None,
        *,
        sim_through_litellm: bool = False,
    ) -> None:
        self.config = config or LLMConfig()
        self._on_call = on_call
        self._responder = responder
        self._sim_through_litellm = sim_through_litellm
        self.gates = ConcurrencyGates(self.config.aimd)
        self._litellm: Any = None
        self._quiet: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
        self._unpriced: set[str] = set()
        models = [self.config.role(r).model for r in ("reflector", "aggregator", "reducer")]
        if responder is None and (sim_through_litellm or not all(is_sim_model(m) for m in models)):
            self._set_up_litellm()

    def _set_up_litellm(self) -> None:
        """Import litellm (seconds, once per process) and register the simulator's provider with it."""
        register_offline_providers([self.config.role(r).model for r in ("reflector", "aggregator", "reducer")])
        from combee_core.llm import provider  # litellm: only in a process that calls it (module docstring)

        self._litellm = provider.litellm
        self._quiet = provider.litellm_logging_skipped

    # ------------------------------------------------------------------------------------------ roles

    async def reflect(self, trace: Trace, playbook_text: str | None = None) -> Reflection:
        """Reflect on one trace. Raises ``LLMCallError`` / ``LLMOutputError`` once retries are exhausted."""
        messages = reflector_messages(trace, playbook_text, context_tokens=self.config.context_tokens,
                                      trace_tokens=self.config.trace_tokens)
        model = self.config.reflector.model
        parse = lambda text: parse_reflection_output(text, role="reflector", model=model)  # noqa: E731
        parsed, usage, latency, records = await self._call("reflector", messages, 1, parse)
        return reflection_from(parsed, trace, model=model, usage=usage, latency_s=latency)

    async def aggregate(self, items: Sequence[Reflection], context: str = "") -> RoleResult:
        """Turn the reflection copies of one subgroup into operations (one call reading ``len(items)`` items)."""
        return await self._operations("aggregator", aggregator_messages(items, context), len(items))

    async def reduce(self, partials: Sequence[Sequence[Operation]], context: str = "") -> RoleResult:
        """Merge partial updates (one item per partial) into one list of operations."""
        return await self._operations("reducer", reducer_messages(partials, context), len(partials))

    async def _operations(self, role: Role, messages: list[dict[str, str]], items_read: int) -> RoleResult:
        model = self.config.role(role).model
        if items_read == 0:
            return RoleResult(operations=[], usage=Usage(), latency_s=0.0, records=[], model=model)
        if (tokens := prompts.items_tokens(messages)) > self.config.payload_tokens:
            raise PromptTooLarge(role, model, f"its {items_read} items are {tokens} tokens, over the "
                                 f"{self.config.payload_tokens}-token payload cap (COMBEE_LLM_PAYLOAD_TOKENS)")
        parse = lambda text: parse_operations_output(text, role=role, model=model)  # noqa: E731
        parsed, usage, latency, records = await self._call(role, messages, items_read, parse)
        return RoleResult(
            operations=list(parsed.operations),
            usage=usage,
            latency_s=latency,
            records=records,
            model=model,
            dropped_items=parsed.dropped,
        )

    # ------------------------------------------------------------------------------------------ calls

    def params_for(self, role: Role) -> dict[str, Any]:
        """The answer-shaping parameters of a role's calls (part of the call key)."""
        cfg = self.config.role(role)
        params: dict[str, Any] = {"temperature": cfg.temperature, **cfg.extra}
        if is_sim_model(cfg.model):
            params[SIM_PARAM] = self.config.simulator.model_dump(mode="json")
        return params

    def concurrency(self, role: Role) -> int:
        """The current concurrency limit of ``role``'s calls (adaptive: :mod:`combee_core.control.concurrency`)."""
        return self.gates.limit(self.config.role(role).model, role)

    async def _emit(self, record: CallRecord) -> None:
        if self._on_call is None:
            return
        result = self._on_call(record)
        if inspect.isawaitable(result):
            await result

    async def _call(
        self, role: Role, messages: list[dict[str, str]], items_read: int, parse: Callable[[str], Any]
    ) -> tuple[Any, Usage, float, list[CallRecord]]:
        cfg = self.config.role(role)
        params = self.params_for(role)
        key = call_key(cfg.model, messages, params)
        total_usage, total_latency = Usage(), 0.0
        records: list[CallRecord] = []
        attempts = cfg.max_retries + 1
        last: LLMError | None = None
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(cfg.backoff(attempt - 1))
            base = {
                "role": role,
                "model": cfg.model,
                "key": key,
                "messages": messages,
                "params": params,
                "items_read": items_read,
                "attempt": attempt,
            }
            request = LLMRequest(role, cfg.model, key, messages, params, attempt)
            async with self.gates.slot(cfg.model, role) as succeeded:
                try:
                    reply = await self._complete(request, cfg)
                except _Attempted as failed:
                    last = failed.error
                    if isinstance(failed.error, LLMCallError) and failed.error.overload:
                        self.gates.overloaded(cfg.model, failed.error.reason, failed.error.retry_after_s)
                    record = CallRecord(**base, error=f"{type(failed.error).__name__}: {failed.error.reason}")
                    records.append(record)
                    await self._emit(record)
                    if isinstance(failed.error, LLMCallError) and not failed.error.retryable:
                        break
                    logger.warning("%s attempt %d/%d failed: %s", role, attempt, attempts, failed.error.reason)
                    continue
                succeeded(reply.latency_s)
            total_usage += reply.usage
            total_latency += reply.latency_s
            common = {
                **base,
                "response_text": reply.text,
                "usage": reply.usage,
                "latency_s": reply.latency_s,
                "modelled_latency_s": reply.modelled_latency_s,
            }
            try:
                parsed = parse(reply.text)
            except LLMOutputError as error:
                last = error
                record = CallRecord(**common, error=f"LLMOutputError: {error.reason}")
                records.append(record)
                await self._emit(record)
                logger.warning("%s attempt %d/%d unparseable: %s", role, attempt, attempts, error.reason)
                continue
            record = CallRecord(**common, dropped_items=parsed.dropped, repaired=parsed.repaired)
            records.append(record)
            await self._emit(record)
            if parsed.dropped:
                logger.info("%s dropped %d invalid item(s): %s", role, parsed.dropped, "; ".join(parsed.problems[:3]))
            return parsed, total_usage, total_latency, records
        assert last is not None
        last.attempts = len(records)
        raise last

    async def _complete(self, request: LLMRequest, cfg: RoleConfig) -> LLMReply:
        """One attempt. Raises ``_Attempted`` for a failure the retry loop handles."""
        if self._responder is not None:
            try:
                return await self._responder(request)
            except LLMCallError as error:
                raise _Attempted(error) from error
        if is_sim_model(request.model) and not self._sim_through_litellm and not litellm_callbacks_watch():
            return await self._simulated(request, cfg)
        if self._litellm is None:  # a simulated call a litellm callback now watches: litellm is already loaded
            self._set_up_litellm()
        litellm = self._litellm
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "timeout": cfg.timeout_s,
            "temperature": cfg.temperature,
            **cfg.extra,
            **NO_PROVIDER_RETRIES,
        }
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if cfg.api_key is not None:
            kwargs["api_key"] = cfg.api_key.get_secret_value()
        if SIM_PARAM in request.params:
            kwargs[SIM_PARAM] = {"config": request.params[SIM_PARAM], "attempt": request.attempt}
        started = time.perf_counter()
        try:
            with self._quiet():  # no litellm logging payload per call: the CallRecord is our log
                response = await asyncio.wait_for(litellm.acompletion(**kwargs), cfg.timeout_s * _TIMEOUT_GRACE + 1.0)
        except TimeoutError as error:
            raise _Attempted(LLMCallError(request.role, request.model, f"no answer within {cfg.timeout_s}s",
                                          overload=True)) from error
        except provider_errors()[2] as error:  # 429 or the provider's timeout: back off (Retry-After if sent)
            raise _Attempted(LLMCallError(request.role, request.model, f"{type(error).__name__}: {error}",
                                          overload=True, retry_after_s=retry_after_s(error))) from error
        except provider_errors()[0] as error:
            raise _Attempted(
                LLMCallError(request.role, request.model, f"{type(error).__name__}: {error}", retryable=False)
            ) from error
        except provider_errors()[1] as error:
            raise _Attempted(LLMCallError(request.role, request.model, f"{type(error).__name__}: {error}")) from error
        wall = time.perf_counter() - started
        return self._reply_from(response, wall)

    async def _simulated(self, request: LLMRequest, cfg: RoleConfig) -> LLMReply:
        """One attempt answered by the simulator in this process (what its litellm provider would answer)."""
        try:
            answer = await asyncio.wait_for(
                answer_simulated(request.role, request.model, request.messages, self.config.simulator,
                                 request.attempt, cfg.timeout_s), cfg.timeout_s * _TIMEOUT_GRACE + 1.0)
        except TimeoutError as error:
            raise _Attempted(LLMCallError(request.role, request.model, f"no answer within {cfg.timeout_s}s",
                                          overload=True)) from error
        except LLMCallError as error:
            raise _Attempted(error) from error
        reply = answer.reply
        usage = Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                      cost_usd=round(max(sim_cost(reply.prompt_tokens, reply.completion_tokens), 0.0), 12), calls=1)
        return LLMReply(text=reply.text, usage=usage, latency_s=answer.latency_s, modelled_latency_s=reply.latency_s)

    def _reply_from(self, response: Any, wall_s: float) -> LLMReply:
        choice = response.choices[0]
        text = getattr(choice.message, "content", None) or ""
        raw_usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(raw_usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(raw_usage, "completion_tokens", 0) or 0)
        cost = self._cost_of(response)
        hidden = (getattr(response, "_hidden_params", None) or {}).get(HIDDEN_PARAM)
        modelled = float(hidden["latency_s"]) if hidden else None
        latency = modelled if modelled is not None and hidden and hidden.get("mode") == "virtual" else wall_s
        usage = Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=round(max(cost, 0.0), 12),  # as Usage.__add__ rounds, so sums stay exact
            calls=1,
        )
        return LLMReply(text=text, usage=usage, latency_s=latency, modelled_latency_s=modelled)

    def _cost_of(self, response: Any) -> float:
        """The USD cost litellm already worked out for this response (``_hidden_params["response_cost"]``: every
        ``acompletion`` prices its response once, or takes the provider's own figure); priced here only if that
        is missing. A model nobody can price costs 0.0, with one warning per model."""
        hidden = getattr(response, "_hidden_params", None) or {}
        if not isinstance(hidden, dict):  # litellm's HiddenParams object on some response types
            hidden = dict(getattr(hidden, "__dict__", {}))
        cost, reason = hidden.get("response_cost"), "litellm has no price for it"
        if cost is None and "response_cost" not in hidden:
            try:
                cost = self._litellm.completion_cost(completion_response=response)
            except Exception as error:  # litellm raises many types here; a missing price must never fail a call
                reason = f"{type(error).__name__}: {error}"
        if cost is None:
            model = str(getattr(response, "model", "?"))
            if model not in self._unpriced:  # once per model: a local or self-hosted model has no price at all
                self._unpriced.add(model)
                logger.warning("no cost for model %r (%s); recording 0.0 for its calls", model, reason)
            return 0.0
        return float(cost)
