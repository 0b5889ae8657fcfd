"""The LLM roles' configuration: the model and call policy of each role, and the simulator's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from combee_core.batch.shuffle import aggregation_shape
from combee_core.control.concurrency import AimdConfig
from combee_core.llm import prompts
from combee_core.llm.simulator import DEFAULT_MODEL, SimulatorConfig
from combee_core.models import Role

if TYPE_CHECKING:
    from combee_core.settings import CombeeSettings


class RoleConfig(BaseModel):
    """Model and call policy of one role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = DEFAULT_MODEL
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=2, ge=0, description="Further attempts after the first one.")
    backoff_s: float = Field(default=0.5, ge=0, description="Wait before retry n: backoff_s * 2**(n-1), no jitter.")
    concurrency: int = Field(default=8, ge=1, description="Calls of this role in flight at once at the start, per "
                             "LLMRoles; it adapts within [1, LLMConfig.concurrency_ceiling] "
                             "(combee_core.control.concurrency).")
    temperature: float = Field(default=0.0, ge=0)
    api_base: str | None = None
    api_key: SecretStr | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="More litellm keyword arguments (max_tokens...).")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return float(self.backoff_s * 2 ** (retry - 1))


class LLMConfig(BaseModel):
    """The three roles and the simulator's settings (used only by ``combee-sim/...`` models)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reflector: RoleConfig = Field(default_factory=RoleConfig)
    aggregator: RoleConfig = Field(default_factory=RoleConfig)
    reducer: RoleConfig = Field(default_factory=RoleConfig)
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    context_tokens: int = Field(default=prompts.CONTEXT_TOKENS, ge=0,
                                description="Cap on the used entries a reflector prompt carries.")
    payload_tokens: int = Field(default=prompts.PAYLOAD_TOKENS, ge=1, description="Cap on the items (reflections "
                                "or partial updates) an aggregator or reducer prompt carries; over it the call is not "
                                "made (PromptTooLarge).")
    trace_tokens: int = Field(default=prompts.TRACE_TOKENS, ge=2_000, description="Cap on the trace a reflector prompt "
                              "carries (texts cut, middle steps dropped, visibly).")
    concurrency_ceiling: int | None = Field(default=None, ge=1, description="Most calls a role may keep in flight "
                                            "per model as its concurrency adapts; None: its start value (fixed).")

    def aimd(self, role: Role) -> AimdConfig:
        """The adaptive concurrency of ``role``'s calls: from its start value up to the ceiling."""
        start = self.role(role).concurrency
        return AimdConfig(initial=start, ceiling=max(start, self.concurrency_ceiling or start))

    @classmethod
    def from_settings(cls, settings: CombeeSettings) -> LLMConfig:
        """The LLM configuration a worker derives from the run's settings."""
        common: dict[str, Any] = {
            "timeout_s": settings.llm_timeout_s,
            "max_retries": settings.llm_max_retries,
            "concurrency": settings.llm_concurrency,
            "api_base": settings.llm_api_base,
            "api_key": settings.llm_api_key,
        }

        def extra(task: prompts.Task) -> dict[str, Any]:
            values: dict[str, Any] = {"max_tokens": settings.llm_max_tokens} if settings.llm_max_tokens else {}
            answer_format = prompts.response_format(settings.llm_response_format, task)
            if answer_format is not None:
                values["response_format"] = answer_format
            return values

        return cls(
            reflector=RoleConfig(model=settings.reflector_model, extra=extra("reflect"), **common),
            aggregator=RoleConfig(model=settings.aggregator_model, extra=extra("aggregate"),
                                  **{**common, "concurrency": aggregator_start(settings)}),
            reducer=RoleConfig(model=settings.reducer_model, extra=extra("reduce"), **common),
            simulator=SimulatorConfig(
                capacity=settings.sim_capacity,
                seed=settings.run_seed,
                time_scale=settings.sim_time_scale,
                mode=settings.sim_clock,
                paraphrases=settings.sim_paraphrases,
            ),
            context_tokens=settings.llm_context_tokens,
            trace_tokens=settings.llm_trace_tokens,
            payload_tokens=settings.llm_payload_tokens,
            concurrency_ceiling=settings.llm_concurrency_max,
        )

    def role(self, role: Role) -> RoleConfig:
        """The config of ``role``."""
        config: RoleConfig = getattr(self, role)
        return config


def aggregator_start(settings: CombeeSettings) -> int:
    """The aggregator's start concurrency: a batch's aggregator calls are made together (the method's parallelism),
    so the calls of one batch at the largest size it runs (``batch_size_bound`` with the controller on, else
    ``batch_size``), within [``llm_concurrency``, ``llm_concurrency_max``]. Started at ``llm_concurrency`` (8) with
    34 calls per batch of 100 at fan-in 6, the limit took 55-130 s to reach them (docs/benchmarks-history.md §12d)."""
    size = settings.batch_size_bound if settings.auto_batch_size else settings.batch_size
    calls = aggregation_shape(size, settings.p, settings.max_fan_in).k
    return max(settings.llm_concurrency, min(calls, settings.llm_concurrency_max))
