"""The LLM judge evaluator's two LLM calls, made as the learning roles make theirs: the roles' retry loop, adaptive
concurrency and :class:`~combee_core.models.CallRecord` of every attempt (``on_call``; the ``llm-calls`` topic),
replay through a ``responder``, the simulator for ``combee-sim/...`` models. Roles ``agent`` and ``judge``; the
prompt version (:data:`~combee_core.judge.prompts.PROMPT_VERSION`) is part of each call's params, so of its key."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from combee_core.judge import prompts
from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMOutputError
from combee_core.llm.parsing import load_json_object
from combee_core.llm.roles import LLMRoles, OnCall, Responder
from combee_core.llm.simulator import is_sim_model
from combee_core.models import CallRecord, HeldOutTask, Role, Usage

ANSWER_CHARS = 20_000
"""Longest agent answer the judge is shown (longer answers are cut, visibly)."""


class JudgeLLMConfig(LLMConfig):
    """The learning roles' configuration plus the judge evaluator's two roles."""

    agent: RoleConfig = Field(default_factory=RoleConfig, description="The user's agent, run on each task.")
    judge: RoleConfig = Field(default_factory=RoleConfig, description="The model that judges the agent's answer.")


@dataclass(frozen=True)
class _Parsed:
    value: Any
    dropped: int = 0
    repaired: bool = False


@dataclass(frozen=True)
class AgentAnswer:
    text: str
    usage: Usage
    records: list[CallRecord]


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on one answer."""

    score: float
    correct: bool
    reason: str
    usage: Usage
    records: list[CallRecord]


def parse_answer(text: str, *, model: str = "") -> _Parsed:
    """The agent's answer: its text, stripped; an empty answer is an output error (retried)."""
    if not text.strip():
        raise LLMOutputError("agent", model, "empty answer", text)
    return _Parsed(text.strip())


def parse_verdict(text: str, *, model: str = "") -> _Parsed:
    """``(score, correct, reason)`` from the judge's JSON: ``score`` in [0, 1], else the verdict's 1 or 0."""
    obj, repaired = load_json_object(text, role="judge", model=model, keys=("verdict", "score"))
    verdict = str(obj.get("verdict", "")).strip().lower()
    raw = obj.get("score")
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw) and 0.0 <= raw <= 1.0:
        score = float(raw)
    elif verdict in ("correct", "incorrect"):
        score = 1.0 if verdict == "correct" else 0.0
    else:
        raise LLMOutputError("judge", model, f"no verdict: score {raw!r}, verdict {verdict!r}", text)
    correct = verdict == "correct" if verdict in ("correct", "incorrect") else score >= 0.5
    return _Parsed((score, correct, str(obj.get("reason") or "")[:500]), repaired=repaired)


class JudgeRoles(LLMRoles):
    """The agent and judge calls of one judge evaluator process (and nothing else of the learning roles')."""

    def __init__(self, config: JudgeLLMConfig, on_call: OnCall | None = None,
                 responder: Responder | None = None) -> None:
        super().__init__(config, on_call, responder)
        self.judge_config = config
        if responder is None and self._litellm is None and not (
                is_sim_model(config.agent.model) and is_sim_model(config.judge.model)):
            self._set_up_litellm()

    def params_for(self, role: Role) -> dict[str, Any]:
        params = super().params_for(role)
        if role in ("agent", "judge"):
            params["prompt_version"] = prompts.PROMPT_VERSION
        return params

    async def run_agent(self, task_input: str, playbook_text: str) -> AgentAnswer:
        """The agent's answer to ``task_input`` with the playbook. Raises ``LLMError`` once retries are spent."""
        model = self.judge_config.agent.model
        messages = prompts.agent_messages(task_input, playbook_text)
        parsed, usage, _, records = await self._call("agent", messages, 1,
                                                     lambda text: parse_answer(text, model=model))
        return AgentAnswer(parsed.value, usage, records)

    async def judge(self, task: HeldOutTask, answer: str) -> Verdict:
        """The judge's verdict on ``answer`` against the task's expected answer or rubric."""
        model = self.judge_config.judge.model
        shown = answer if len(answer) <= ANSWER_CHARS else answer[:ANSWER_CHARS] + " [... answer cut]"
        messages = prompts.judge_messages(task, shown)
        parsed, usage, _, records = await self._call("judge", messages, 1,
                                                     lambda text: parse_verdict(text, model=model))
        score, correct, reason = parsed.value
        return Verdict(score, correct, reason, usage, records)
