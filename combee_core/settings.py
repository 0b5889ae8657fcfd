"""One settings object for a Combee run: environment variables with a ``COMBEE_`` prefix, overridable by CLI flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from combee_core.errors import CombeeError

ENV_PREFIX = "COMBEE_"


class SettingsError(CombeeError, ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


class CombeeSettings(BaseModel):
    """Everything a worker, a producer or the demo needs to agree on.

    Each field can be set from the environment as ``COMBEE_<FIELD_NAME_UPPER>`` (e.g. ``COMBEE_KAFKA_BOOTSTRAP``,
    ``COMBEE_BATCH_SIZE``); explicit overrides (CLI flags) win over the environment.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers; none -> the broker `combee broker` recorded, if it runs."
    )
    broker_kind: Literal["auto", "kafka", "tansu"] = Field(
        default="auto", description="Which broker profile to use; auto -> tansu when embedded, kafka otherwise."
    )
    broker_connect_timeout_s: float = Field(
        default=5.0, gt=0, le=600, description="How long a command waits for the broker to answer when it starts; "
        "then it exits with status 2."
    )
    broker_loss_grace_s: float = Field(
        default=60.0, gt=0, description="How long a running worker (or `combee tail`) keeps going without an answer "
        "from its broker; then it stops and exits with status 3."
    )
    topic_prefix: str = Field(default="combee.", pattern=r"^[A-Za-z0-9._-]*$")
    run_id: str = Field(default="default", pattern=r"^[A-Za-z0-9._-]+$", description="Names consumer groups.")
    partitions: int = Field(default=4, ge=1, le=256, description="Partitions of the traces and shuffle topics.")
    run_seed: int = Field(default=0, description="Seed of every random choice (shuffle, simulator).")
    p: int = Field(default=2, ge=1, le=8, description="Copies of every reflection in the augmented shuffle.")
    subgroups: Literal["sqrt", "single"] = Field(
        default="sqrt", description="sqrt: k = floor(sqrt(n)) (Combee); single: k = 1 (naive one-call baseline)."
    )
    batch_size: int = Field(default=40, ge=1, le=10_000, description="Fixed batch size, or the start size in auto.")
    auto_batch_size: bool = Field(default=False, description="Let the controller choose the batch size.")
    max_wait_s: float = Field(default=10.0, gt=0, description="Close a non-empty batch after this many seconds.")
    batch_idle_s: float | None = Field(
        default=None, gt=0, description="Close a non-empty batch after this many seconds without a new reflection "
        "(a stream that pauses or stops gets its last traces learned without waiting max_wait_s); none: off. "
        "For streams, a few times the gap between the reflector's fetches (~2 call latencies), e.g. 3."
    )
    max_fan_in: int = Field(default=32, ge=2, description="Most items any one LLM call may read.")
    deterministic_merge: bool = Field(
        default=True, description="Merge a batch's partials without the reducer call when they do not conflict "
        "(combee_core.reduction.merge_without_conflict); the reducer call still judges conflicting ones."
    )
    dedupe_horizon: int = Field(
        default=1_000_000, ge=1, description="Per playbook, how many most recently batched trace ids the batcher "
        "remembers to drop resends (about 200 bytes each); a trace resent after that many newer ones is batched again."
    )
    window_timeout_s: float = Field(
        default=60.0, gt=0, description="Close an aggregator window with missing copies after this long."
    )
    view_checkpoint_every: int = Field(
        default=2000, ge=1, description="Records of a state topic between two checkpoints of a stage's view of it "
        "(a restart resumes from the latest checkpoint instead of reading the topic from the beginning)."
    )
    overload_policy: Literal["keep", "sample"] = Field(
        default="keep", description="When a playbook falls behind its stream: keep every trace and fall behind (said "
        "in the log, status and /metrics), or sample: shed successes first (failures carry the lessons) so what is "
        "kept fits the rate out, each shed trace a dead letter (Shed) with the reason (docs/operations.md)."
    )
    backlog_window_s: float = Field(
        default=20.0, gt=0, description="Window over which a playbook's rate in and rate out are measured."
    )
    backlog_warning_s: float = Field(
        default=120.0, gt=0, description="A playbook whose oldest trace not yet in a version was sent longer ago than "
        "this is falling behind (so is one whose lag grew over the window with more in than out)."
    )
    stall_warning_s: float = Field(
        default=180.0, gt=0, description="Warn when a closed batch has waited this long for its playbook version."
    )
    playbook_budget_tokens: int = Field(
        default=8_000, ge=0, description="Most tokens (ceil(chars / 4) of the rendered playbook) a version may hold; "
        "a version over it evicts its lowest-valued entries, each recorded as a DELETE with the reason."
    )
    playbook_delete_cap: float = Field(
        default=0.25, ge=0.0, le=1.0, description="Share of the previous version's entries the model's operations "
        "may remove in one version (DELETE, MERGE), at least one; further removals are rejected with the reason."
    )
    llm_context: bool = Field(
        default=True, description="Show the roles the playbook: the reflector the entries the agent used, the "
        "aggregator and reducer the current playbook (off: the roles work blind, as a baseline)."
    )
    llm_context_tokens: int = Field(
        default=8_000, ge=0, description="Most tokens of playbook one aggregator or reducer prompt carries (the "
        "highest-valued entries first when the playbook is larger)."
    )
    sim_paraphrases: int = Field(
        default=1, ge=1, le=4, description="Simulator: wordings a reflection draws a lesson's text from (1: the "
        "feedback's own words; docs/simulator.md)."
    )
    controller_tau: float = Field(default=0.016, gt=0)
    controller_bs_min: int = Field(default=1, ge=1)
    controller_bs_max: int = Field(
        default=100, ge=1, description="Upper bound on the batch size (the paper's bound against quality risk; 100 is "
        "the largest size the paper runs Combee at)."
    )
    controller_objective: Literal["stream", "delay"] = Field(
        default="stream", description="Async fleets: stream picks the batch size whose versions keep up with the "
        "arrival rate at the lowest trace -> version latency (combee_core/streaming.py); delay minimises the per-trace "
        "pipeline delay (the profiled power law). Sync fleets always fit the round time."
    )
    controller_max_utilisation: float = Field(
        default=0.8, gt=0, lt=1, description="Streaming objective: the busiest the version chain may be at the chosen "
        "size (headroom so a burst drains)."
    )
    controller_clock: Literal["wall", "modelled"] = Field(
        default="wall", description="Delay the controller fits: wall seconds, or the LLM critical path (simulated)."
    )
    fleet_mode: Literal["sync", "async"] = Field(
        default="async", description="How the agents feeding a playbook run. sync: each round waits for the next "
        "version, so the controller fits the round time (version v -> v+1, rollouts included); async: it fits the "
        "pipeline delay (batch closed -> version published)."
    )
    fleet_agents: int | None = Field(
        default=None, ge=1, description="Sync fleet, modelled clock: parallel agents (a round of n tasks takes "
        "ceil(n / agents) task times); none: one agent per task."
    )
    rollout_calls_per_task: int = Field(
        default=10, ge=0, description="Rollout model: agent LLM calls per task (docs/simulator.md, 'Rollouts')."
    )
    rollout_prompt_tokens: int = Field(default=2000, ge=0, description="Rollout model: prompt tokens per agent call.")
    rollout_completion_tokens: int = Field(
        default=150, ge=0, description="Rollout model: completion tokens per agent call."
    )
    max_staleness: int | None = Field(
        default=None, ge=0, description="Async mode: drop traces more than this many versions behind (dead letter)."
    )
    promotion: bool = Field(
        default=False, description="Gate versions: every version is a candidate, scored on a held-out set; the "
        "`promoted` topic says which one agents run, and the reducer builds on that one (docs/architecture.md).",
    )
    promotion_epsilon: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Promote a candidate when held_out >= incumbent - epsilon."
    )
    canary_share: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="With promotion: share of agents that run a candidate that passed "
        "the held-out rule before it is promoted (0: no canary). Only for traces that carry scores.",
    )
    canary_min_traces: int = Field(
        default=20, ge=1, description="Live scored traces the canary and the incumbent each need before the verdict.",
    )
    eval_suite_seed: int = Field(default=7, description="Seed of the task suite whose held-out split is the pinned "
                                 "evaluation set.")
    eval_suite_families: int = Field(default=24, ge=1, le=1000, description="Rule families of that suite.")
    evaluator_model: str = Field(
        default="combee-sim/suite-expected-accuracy", description="What the built-in evaluator reports as its model "
        "(it scores the simulated suite's expected success, no LLM).",
    )
    reflector_model: str = "combee-sim/default"
    aggregator_model: str = "combee-sim/default"
    reducer_model: str = "combee-sim/default"
    llm_api_base: str | None = None
    llm_api_key: SecretStr | None = Field(
        default=None, description="API key sent with every role's calls; none -> the provider's own env var."
    )
    llm_max_tokens: int | None = Field(
        default=None, ge=1, description="Cap on the tokens of each answer (litellm max_tokens); none -> the model's."
    )
    llm_response_format: Literal["text", "json_object", "json_schema", "llama_cpp_schema"] = Field(
        default="text", description="How roles ask for JSON: the prompt only, JSON mode, or the answer schema "
        "(OpenAI/vLLM json_schema, or llama-cpp-python's schema-constrained JSON mode); see docs/models.md."
    )
    llm_timeout_s: float = Field(default=120.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0)
    llm_concurrency: int = Field(default=8, ge=1, description="LLM calls each role keeps in flight per worker at "
                                 "the start; it adapts up to llm_concurrency_max (docs/operations.md, 'Capacity').")
    llm_concurrency_max: int = Field(
        default=64, ge=1, description="Ceiling of each role's adaptive concurrency per model: raised while latency "
        "holds, halved on a 429 or a timeout. Set it to llm_concurrency to keep the concurrency fixed (it still backs "
        "off)."
    )
    sim_capacity: int = Field(default=12, ge=1, description="Simulator context capacity C (items per call).")
    sim_time_scale: float = Field(default=1.0, ge=0.0, description="Multiplier on the simulator's modelled latency.")
    sim_clock: Literal["real", "virtual"] = Field(default="real")
    llm_record: Literal["off", "record", "replay"] = Field(
        default="off",
        description="off: call the models (every call still goes to the llm-calls topic); record: also append each "
        "call to llm_record_file; replay: answer every call from the record and fail on a miss (docs/replay.md).",
    )
    llm_record_file: str | None = Field(
        default=None, description="JSONL call store: written in record mode, read in replay mode."
    )
    llm_record_topic: str | None = Field(
        default=None, description="Full topic name replay reads recorded calls from when there is no llm_record_file "
        "(default: this run's llm-calls topic)."
    )
    batch_plan_topic: str | None = Field(
        default=None, description="Full name of a topic of BatchManifest records the batcher follows instead of "
        "closing batches by size and time (replay)."
    )

    @field_validator("kafka_bootstrap", "llm_record_file", "llm_record_topic", "batch_plan_topic")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value or None

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> CombeeSettings:
        """Build settings from ``COMBEE_*`` environment variables, then apply non-None ``overrides``."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = source.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            problems = "; ".join(
                f"{ENV_PREFIX}{'.'.join(str(p) for p in e['loc']).upper()} (or --{str(e['loc'][0]).replace('_', '-')}):"
                f" {e['msg']}"
                for e in error.errors()
            )
            raise SettingsError(f"invalid settings: {problems}") from error

    def topic(self, name: str) -> str:
        """Full topic name for a logical topic (``traces``, ``playbook``, ...)."""
        return f"{self.topic_prefix}{name}"

    def group(self, stage: str) -> str:
        """Consumer group id of a stage for this run."""
        return f"{self.topic_prefix}{self.run_id}.{stage}"
