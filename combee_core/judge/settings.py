"""The judge evaluator's settings: its two litellm models and their call policy (``COMBEE_JUDGE_*`` variables,
overridden by ``combee judge`` flags). A bad value is a one-line :class:`JudgeConfigError`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from combee_core.errors import CombeeError
from combee_core.judge.calls import JudgeLLMConfig
from combee_core.llm.config import RoleConfig
from combee_core.llm.simulator import SimulatorConfig, is_sim_model
from combee_core.models import first_error

_MODEL = re.compile(r"^[A-Za-z0-9][\w.:@/+-]*$")
ENV = {"judge_model": "COMBEE_JUDGE_MODEL", "agent_model": "COMBEE_JUDGE_AGENT_MODEL",
       "timeout_s": "COMBEE_JUDGE_TIMEOUT_S", "max_retries": "COMBEE_JUDGE_MAX_RETRIES",
       "max_tokens": "COMBEE_JUDGE_MAX_TOKENS", "api_base": "COMBEE_JUDGE_API_BASE",
       "agent_api_base": "COMBEE_JUDGE_AGENT_API_BASE", "seed": "COMBEE_RUN_SEED"}
"""Each setting's environment variable."""


class JudgeConfigError(CombeeError, ValueError):
    """A judge setting that cannot work (one line, naming the setting)."""


class JudgeSettings(BaseModel):
    """What the judge evaluator calls. Models are litellm model names (``openai/gpt-4o-mini``, ``ollama/qwen2.5``;
    ``combee-sim/...`` for the offline simulator)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge_model: str = Field(description="The model that judges each answer.")
    agent_model: str = Field(description="The user's agent model, run on each task with the candidate playbook.")
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    api_base: str | None = Field(default=None, description="The judge model's server, when not the provider's.")
    agent_api_base: str | None = Field(default=None, description="The agent model's server.")
    seed: int = Field(default=0, description="The simulator's seed (combee-sim models only).")

    @field_validator("judge_model", "agent_model")
    @classmethod
    def _litellm_name(cls, value: str) -> str:
        if not _MODEL.match(value):
            raise ValueError(f"{value!r} is not a litellm model name (e.g. openai/gpt-4o-mini, combee-sim/judge)")
        return value

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
             ) -> JudgeSettings:
        """From ``COMBEE_JUDGE_*`` (see :data:`ENV`), with ``overrides`` (flags; None values ignored) on top."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {key: environ[name] for key, name in ENV.items() if environ.get(name)}
        values.update({key: value for key, value in (overrides or {}).items() if value is not None})
        for key in ("judge_model", "agent_model"):
            if key not in values:
                raise JudgeConfigError(f"no {key.replace('_', ' ')}: set {ENV[key]} or --{key.replace('_', '-')}")
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise JudgeConfigError(_named(error)) from error

    def check_routable(self) -> None:
        """Raise :class:`JudgeConfigError` when litellm cannot route a (non-simulator) model; imports litellm."""
        for key in ("judge_model", "agent_model"):
            model = getattr(self, key)
            if is_sim_model(model):
                continue
            import litellm  # seconds to import: only for a real model

            try:
                litellm.get_llm_provider(model)
            except Exception as error:  # litellm raises its BadRequestError (and others) for an unknown provider
                raise JudgeConfigError(f"{ENV[key]}={model!r}: litellm cannot route it ({str(error).splitlines()[0]})"
                                       ) from error

    def llm_config(self) -> JudgeLLMConfig:
        extra: dict[str, Any] = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        common: dict[str, Any] = {"timeout_s": self.timeout_s, "max_retries": self.max_retries, "extra": extra}
        return JudgeLLMConfig(agent=RoleConfig(model=self.agent_model, api_base=self.agent_api_base, **common),
                              judge=RoleConfig(model=self.judge_model, api_base=self.api_base, **common),
                              simulator=SimulatorConfig(seed=self.seed))


def _named(error: ValidationError) -> str:
    """``COMBEE_JUDGE_TIMEOUT_S: Input should be greater than 0`` from pydantic's first error."""
    first = error.errors()[0]
    key = str(first["loc"][0]) if first.get("loc") else ""
    return f"{ENV.get(key, key)}: {first['msg']}" if key else first_error(error)
