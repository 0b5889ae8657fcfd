"""Promotion: evaluation requests and results, and the decisions on the ``promoted`` topic."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import orjson
from pydantic import Field

from combee_core import limits
from combee_core.models.base import SCHEMA_VERSION, CombeeModel, Identifier, PlaybookId, Timestamp, Usage
from combee_core.models.versions import PlaybookEntry, PlaybookVersion


def entries_digest(entries: list[PlaybookEntry]) -> str:
    """sha256 of what an agent reads of a playbook: each entry's section and content, in order (not ids, counters or
    the version number). Two versions with the same text share it, so evaluation results are cached by it."""
    payload = [[entry.section, entry.content] for entry in entries]
    return hashlib.sha256(orjson.dumps(payload)).hexdigest()


class EvalRequest(CombeeModel):
    """Score one playbook (as an agent reads it) on one held-out task. Answered by an :class:`EvalResult`."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: Identifier = Field(description="<playbook_id>/<digest[:16]>/<task_id>: the same pair is one request.")
    playbook_id: PlaybookId
    version: int = Field(ge=0, description="A version with this content (0 = the empty playbook).")
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="entries_digest(entries): the cache key with task_id.")
    task_set: Identifier = Field(description="The pinned held-out task set the task belongs to, as name@version "
                                 "(e.g. support-heldout@2); echo it in the result.")
    task_id: Identifier
    task_input: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)] = ""
    expected: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)] | None = Field(
        default=None, description="The task's expected answer, when its set gives one.")
    rubric: Annotated[str, Field(max_length=limits.MAX_TRACE_TEXT_CHARS)] | None = Field(
        default=None, description="How to judge an answer to the task, when its set gives it.")
    task_metadata: dict[Annotated[str, Field(max_length=limits.MAX_ID_CHARS)],
                        Annotated[str, Field(max_length=limits.MAX_METADATA_VALUE_CHARS)]] = Field(
        default_factory=dict, max_length=limits.MAX_METADATA_KEYS, description="The task's metadata in its set.")
    entries: list[PlaybookEntry]
    requested_at: Timestamp


class EvalResult(CombeeModel):
    """An evaluator's score for one (playbook content, task)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: Identifier
    playbook_id: PlaybookId
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    task_id: Identifier
    task_set: Annotated[str, Field(max_length=limits.MAX_ID_CHARS)] = Field(
        default="", description="The request's task_set, echoed. A result without it counts for any set's task of "
        "this id (evaluators written before task sets).")
    score: float | None = Field(default=None, ge=0.0, le=1.0, description="None when the evaluation failed.")
    error: Annotated[str, Field(max_length=limits.MAX_DEAD_LETTER_REASON_CHARS)] = ""
    evaluator: Identifier = Field(description="Which evaluator answered (e.g. combee-builtin, node-example).")
    evaluator_model: str = Field(description="The model that judged, or the simulator that stood in for one.")
    usage: Usage | None = Field(default=None, description="What the evaluation's LLM calls cost, when the evaluator "
                                "called models and says so (the LLM judge: its agent and judge calls).")
    evaluated_at: Timestamp


class ProposerModels(CombeeModel):
    """The models that proposed a candidate (named apart from the evaluator's)."""

    reflector: str
    aggregator: str
    reducer: str


class ImprovementCost(CombeeModel):
    """What the candidates since the incumbent cost (rejected ones included), per held-out point gained.

    From each candidate's ``VersionStats`` (its traces, the aggregator and reducer calls that built it) and its
    batch's ``BatchManifest.reflection_usage`` (the reflector's calls), when the manifest carries it."""

    candidates: int = Field(ge=0)
    traces: int = Field(ge=0)
    llm_calls: int = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cost_usd: float = Field(ge=0.0)
    gain_points: float = Field(description="(held-out score - incumbent score) x 100.")
    cost_usd_per_point: float | None = Field(default=None, description="None unless the gain is positive.")
    traces_per_point: float | None = None
    tokens_per_point: float | None = None


class LiveTest(CombeeModel):
    """The guard's statistics behind a rollback: live traces of the rolled-back version against its parent's
    (``combee_core.guard.rule``), at the trace where the test crossed its threshold."""

    metric: Literal["success", "score"]
    version: int = Field(ge=1, description="The version judged (rolled back).")
    parent_version: int = Field(ge=0, description="The version it was built on (served again).")
    traces: int = Field(ge=0, description="Live traces of the judged version counted.")
    parent_traces: int = Field(ge=0, description="Live traces of the parent counted.")
    mean: float = Field(description="Mean live success (or score) of the judged version.")
    parent_mean: float
    log_lr: float = Field(description="log of the mixture likelihood ratio (mSPRT) at the crossing.")
    threshold: float = Field(description="log(1/alpha): the alarm threshold.")
    alpha: float = Field(gt=0.0, lt=1.0, description="Nominal false-alarm rate per judged version.")
    tau: float = Field(gt=0.0, description="Sd of the normal mixture over the difference of means.")
    min_traces: int = Field(ge=1)


class PromotionDecision(CombeeModel):
    """One record of the ``promoted`` topic: a decision on a candidate, or an operator's promote / rollback. Its
    ``served`` field is the pointer: the version every follower of promoted versions runs from now on."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    decision_id: int = Field(ge=0, description="0, 1, 2, ... per playbook; the first record of each id counts.")
    action: Literal["promote", "reject", "hold", "canary", "operator-promote", "rollback"]
    candidate_version: int | None = Field(default=None, ge=1, description="The candidate decided on (None for an "
                                          "operator's rollback; the rolled-back version for the guard's).")
    candidate_hash: str | None = None
    served_version: int = Field(ge=0, description="The pointer after this decision (0 = the empty playbook).")
    served: PlaybookVersion | None = Field(description="The served version in full (None for version 0).")
    previous_version: int = Field(ge=0, description="The served version before this decision.")
    newest_version: int | None = Field(default=None, ge=0, description="Without promotion (the guard's and "
                                       "operators' decisions): the newest version when the decision was made; no "
                                       "version up to it but the served one runs after it.")
    held_out_score: float | None = None
    incumbent_score: float | None = None
    task_set: str = ""
    tasks: int = Field(default=0, ge=0, description="Held-out tasks behind each score.")
    rule: str = Field(description="The promotion rule as configured, e.g. held_out >= incumbent - 0.01.")
    reason: str
    paused: bool = Field(default=False, description="Automatic promotion paused (after a rollback) until an operator "
                         "promotes a version.")
    canary: PlaybookVersion | None = Field(default=None, description="With action canary: the candidate that the "
                                           "canary share of agents runs meanwhile (the others run served).")
    canary_share: float | None = Field(default=None, ge=0.0, le=1.0, description="Share of agents in the canary "
                                       "(an agent is in it when unit_hash(agent_id) < share).")
    canary_score: float | None = Field(default=None, description="Mean live score of the canary's traces.")
    canary_incumbent_score: float | None = Field(default=None, description="Mean live score of the incumbent's "
                                                 "traces during the canary.")
    canary_traces: int = Field(default=0, ge=0, description="Live traces behind each canary score.")
    proposer: ProposerModels | None = None
    evaluator_model: str | None = None
    cost: ImprovementCost | None = None
    live_test: LiveTest | None = Field(default=None, description="With a rollback by the guard: the test that "
                                       "made it.")
    by: str = Field(description="promoter, guard (its automatic rollback), or the operator (user@host) for "
                    "promote / rollback.")
    decided_at: Timestamp

    def decision_hash(self) -> str:
        """sha256 of every field but the time: what a replay must reproduce byte for byte."""
        payload = self.model_dump(mode="json", exclude={"decided_at"})
        if payload.get("served"):
            payload["served"].pop("published_at", None)
            payload["served"].pop("stats", None)
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
