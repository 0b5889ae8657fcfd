"""Promotion: which candidate version every agent is served, decided on held-out scores (no Kafka).

Every version the reducer builds is a *candidate*. The ``promoted`` log holds, per playbook, numbered decisions
(``decision_id`` 0, 1, 2, ...; the first record of each id counts, like versions); the latest one's ``served`` is
the pointer followers run. :class:`PromotionLedger` applies that reading rule; :func:`decide` is the rule;
:func:`next_base` tells the reducer what to build the next version on, so learning never builds on a rejected
candidate. Everything here is a function of the logs, so a replay of the same logs makes the same decisions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from combee_core.errors import CombeeError
from combee_core.log_order import ContiguousNumbers
from combee_core.models import (
    EvalRequest,
    EvalResult,
    PlaybookEntry,
    PlaybookVersion,
    PromotionDecision,
    ProposerModels,
    entries_digest,
)
from combee_core.promote.improvement_cost import CandidateCost, improvement_cost
from combee_core.promote.task_sets import PinnedTask, task_key

PROMOTER = "promoter"


class PromotionError(CombeeError, ValueError):
    """An operator's promote or rollback that cannot be done (unknown version, nothing to roll back to)."""


@dataclass(frozen=True)
class PromotionRule:
    """Promote a candidate when its held-out score >= the incumbent's - epsilon, and, with a canary, when the mean
    live score of its first ``canary_min_traces`` scored traces >= that of the incumbent's meanwhile - epsilon."""

    epsilon: float = 0.0
    canary_share: float = 0.0
    canary_min_traces: int = 20

    def describe(self) -> str:
        held_out = f"held_out >= incumbent - {self.epsilon:g}"
        if self.canary_share <= 0:
            return held_out
        return (f"{held_out}, then canary ({self.canary_share:g} of agents): live score over "
                f"{self.canary_min_traces} traces >= incumbent's live score - {self.epsilon:g}")

    def accepts(self, held_out: float, incumbent: float) -> bool:
        return held_out >= incumbent - self.epsilon - 1e-12


@dataclass
class PromotionLedger:
    """The ``promoted`` log read with its reading rule: per playbook, the served version, whether automatic
    promotion is paused, and the decision on each candidate."""

    gate: ContiguousNumbers[str] = field(default_factory=ContiguousNumbers)
    latest: dict[str, PromotionDecision] = field(default_factory=dict)
    by_candidate: dict[str, dict[int, PromotionDecision]] = field(default_factory=dict)
    first_on_candidate: dict[str, dict[int, PromotionDecision]] = field(default_factory=dict)
    """Per playbook and candidate, the first decision on it (with a canary, the ``canary`` one): what the reducer
    builds the next version on, whenever the verdict comes."""
    served_history: dict[str, list[int]] = field(default_factory=dict)
    """Per playbook, each version served in turn (starting with 0)."""
    named: dict[str, int] = field(default_factory=dict)
    """Per playbook, the newest version any decision named (served, previous, candidate or newest): every version up
    to it existed when a decision was made (``combee_core.guard.rule.clean``)."""

    def apply(self, decision: PromotionDecision) -> bool:
        """Take one record in log order; False (void) when its decision_id is not the next one."""
        if not self.gate.accept(decision.playbook_id, decision.decision_id):
            return False
        self.latest[decision.playbook_id] = decision
        self.named[decision.playbook_id] = max(self.named.get(decision.playbook_id, 0), decision.served_version,
                                               decision.previous_version, decision.candidate_version or 0,
                                               decision.newest_version or 0)
        history = self.served_history.setdefault(decision.playbook_id, [0])
        if history[-1] != decision.served_version:
            history.append(decision.served_version)
        if decision.candidate_version is not None and decision.action in ("promote", "reject", "hold", "canary"):
            self.by_candidate.setdefault(decision.playbook_id, {})[decision.candidate_version] = decision
            self.first_on_candidate.setdefault(decision.playbook_id, {}).setdefault(decision.candidate_version,
                                                                                   decision)
        return True

    def next_id(self, playbook_id: str) -> int:
        return self.gate.next(playbook_id)

    def served(self, playbook_id: str) -> PlaybookVersion | None:
        """The served version (None: the empty version 0)."""
        latest = self.latest.get(playbook_id)
        return latest.served if latest is not None else None

    def served_version(self, playbook_id: str) -> int:
        latest = self.latest.get(playbook_id)
        return latest.served_version if latest is not None else 0

    def paused(self, playbook_id: str) -> bool:
        latest = self.latest.get(playbook_id)
        return latest.paused if latest is not None else False

    def decision_on(self, playbook_id: str, candidate_version: int) -> PromotionDecision | None:
        return self.by_candidate.get(playbook_id, {}).get(candidate_version)

    def canary(self, playbook_id: str) -> PlaybookVersion | None:
        """The candidate in canary now (the latest decision is its ``canary``), or None."""
        latest = self.latest.get(playbook_id)
        return latest.canary if latest is not None and latest.action == "canary" else None

    def last_decided(self, playbook_id: str) -> int:
        """The newest candidate version decided on (0 before the first)."""
        return max(self.by_candidate.get(playbook_id, {}), default=0)

    def playbooks(self) -> list[str]:
        return sorted(self.latest)


def load_ledger(decisions: Iterable[PromotionDecision]) -> PromotionLedger:
    ledger = PromotionLedger()
    for decision in decisions:
        ledger.apply(decision)
    return ledger


# ---------------------------------------------------------------------------------------------- evaluation


@dataclass
class ScoreCache:
    """Evaluation results by (entries digest, ``name@version/task_id``): the same pair is evaluated once."""

    results: dict[tuple[str, str], EvalResult] = field(default_factory=dict)

    def add(self, result: EvalResult) -> bool:
        """Keep the first result of each pair; False for a repeat."""
        key = (result.digest, task_key(result.task_set, result.task_id))
        if key in self.results:
            return False
        self.results[key] = result
        return True

    def result(self, digest: str, task: PinnedTask) -> EvalResult | None:
        """The result of the pair, or else one without a task set (an evaluator that does not echo it) of its id."""
        return self.results.get((digest, task.key)) or self.results.get((digest, task_key("", task.task_id)))

    def missing(self, digest: str, tasks: Sequence[PinnedTask]) -> list[PinnedTask]:
        return [task for task in tasks if self.result(digest, task) is None]

    def score(self, digest: str, tasks: Sequence[PinnedTask]) -> tuple[float | None, str, str]:
        """(mean score over ``tasks``, the first error, the evaluator model); the mean is None until every task has
        a result, or when one failed."""
        results = [self.result(digest, task) for task in tasks]
        if any(result is None for result in results) or not results:
            return None, "", ""
        models = sorted({r.evaluator_model for r in results if r is not None})
        failed = [r for r in results if r is not None and r.score is None]
        if failed:
            return None, f"task {failed[0].task_id}: {failed[0].error or 'no score'}", ", ".join(models)
        scores = [r.score for r in results if r is not None and r.score is not None]
        return sum(scores) / len(results), "", ", ".join(models)

    def drop(self, digest: str, task: PinnedTask) -> None:
        """Forget the pair's result (it is summarised)."""
        self.results.pop((digest, task.key), None)
        self.results.pop((digest, task_key("", task.task_id)), None)


def eval_requests(playbook_id: str, version: int, entries: list[PlaybookEntry],
                  tasks: Sequence[PinnedTask], now: datetime) -> list[EvalRequest]:
    """One request per task for this playbook content."""
    digest = entries_digest(entries)
    return [
        EvalRequest(request_id=f"{playbook_id}/{digest[:16]}/{task.task_id}", playbook_id=playbook_id,
                    version=version, digest=digest, task_set=task.task_set, task_id=task.task_id,
                    task_input=task.task.input, expected=task.task.expected, rubric=task.task.rubric,
                    task_metadata=dict(task.task.metadata), entries=list(entries), requested_at=now)
        for task in tasks
    ]


# ---------------------------------------------------------------------------------------------- the rule


def decide(
    rule: PromotionRule,
    ledger: PromotionLedger,
    candidate: PlaybookVersion,
    *,
    candidate_score: float | None,
    incumbent_score: float | None,
    error: str = "",
    costs: Sequence[CandidateCost],
    task_set: str,
    tasks: int,
    proposer: ProposerModels,
    evaluator_model: str,
    now: datetime,
) -> PromotionDecision:
    """The decision on ``candidate`` against the ledger's served version. ``costs``: the candidates after the
    incumbent up to this one (rejected ones included)."""
    playbook_id = candidate.playbook_id
    incumbent = ledger.served(playbook_id)
    incumbent_version = ledger.served_version(playbook_id)
    common: dict[str, Any]
    common = dict(playbook_id=playbook_id, decision_id=ledger.next_id(playbook_id),
                  candidate_version=candidate.version, candidate_hash=candidate.content_hash,
                  previous_version=incumbent_version, held_out_score=candidate_score, incumbent_score=incumbent_score,
                  task_set=task_set, tasks=tasks, rule=rule.describe(), proposer=proposer,
                  evaluator_model=evaluator_model or None, by=PROMOTER, decided_at=now)
    keep: dict[str, Any]
    keep = dict(served_version=incumbent_version, served=incumbent)
    if ledger.paused(playbook_id):
        return PromotionDecision(action="hold", **keep, paused=True, **common,
                                 reason=f"automatic promotion is paused since a rollback to v{incumbent_version}; "
                                 "`combee promote` resumes it")
    if error or candidate_score is None or incumbent_score is None:
        return PromotionDecision(action="reject", **keep, **common,
                                 reason=f"evaluation failed: {error or 'no score'}")
    gain = candidate_score - incumbent_score
    verdict = f"held-out {candidate_score:.4f} vs incumbent v{incumbent_version} {incumbent_score:.4f}"
    if rule.accepts(candidate_score, incumbent_score) and rule.canary_share > 0:
        return PromotionDecision(action="canary", **keep, **common, canary=candidate, canary_share=rule.canary_share,
                                 reason=f"{verdict}: the held-out rule holds; canary: {rule.canary_share:g} of agents "
                                 f"run v{candidate.version} until each side has {rule.canary_min_traces} scored traces")
    if rule.accepts(candidate_score, incumbent_score):
        return PromotionDecision(action="promote", served_version=candidate.version, served=candidate, **common,
                                 cost=improvement_cost(costs, gain), reason=f"{verdict}: {rule.describe()} holds")
    return PromotionDecision(action="reject", **keep, **common,
                             reason=f"{verdict}: {rule.describe()} fails; learning continues from "
                             f"v{incumbent_version}, this batch's operations stay in candidate v{candidate.version}")


def in_canary(agent_id: str, share: float) -> bool:
    """Whether an agent belongs to a canary of this share: unit_hash(agent_id) < share (the same agents every time)."""
    digest = hashlib.sha256(agent_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


LiveScore = tuple[int, float | None]
"""(playbook_version, score) of one trace of the playbook, in the order of its traces partition."""


def canary_verdict(
    rule: PromotionRule,
    ledger: PromotionLedger,
    playbook_id: str,
    live: Sequence[LiveScore],
    *,
    costs: Sequence[CandidateCost],
    now: datetime,
) -> PromotionDecision | None:
    """The verdict on the candidate in canary, from the playbook's live traces in log order: the first
    ``canary_min_traces`` scored traces run with the candidate, against the first as many run with the incumbent
    from the first canary trace on. None while either side has fewer. A function of the log alone."""
    latest = ledger.latest.get(playbook_id)
    if latest is None or latest.action != "canary" or latest.canary is None:
        return None
    candidate = latest.canary
    need = rule.canary_min_traces
    canary_at = [i for i, (version, score) in enumerate(live) if version == candidate.version and score is not None]
    if len(canary_at) < need:
        return None
    canary = [live[i][1] for i in canary_at[:need]]
    incumbent = [score for version, score in live[canary_at[0]:]
                 if version == latest.served_version and score is not None][:need]
    if len(incumbent) < need:
        return None
    canary_score = sum(canary) / need  # type: ignore[arg-type]
    incumbent_score = sum(incumbent) / need
    verdict = (f"canary v{candidate.version} live {canary_score:.4f} vs incumbent v{latest.served_version} live "
               f"{incumbent_score:.4f} over {need} traces each")
    common: dict[str, Any]
    common = dict(playbook_id=candidate.playbook_id, decision_id=ledger.next_id(candidate.playbook_id),
                  candidate_version=candidate.version, candidate_hash=candidate.content_hash,
                  previous_version=latest.served_version, held_out_score=latest.held_out_score,
                  incumbent_score=latest.incumbent_score, task_set=latest.task_set, tasks=latest.tasks,
                  rule=rule.describe(), proposer=latest.proposer, evaluator_model=latest.evaluator_model,
                  canary_share=latest.canary_share, canary_score=canary_score,
                  canary_incumbent_score=incumbent_score, canary_traces=need, by=PROMOTER, decided_at=now)
    if rule.accepts(canary_score, incumbent_score):
        gain = (latest.held_out_score or 0.0) - (latest.incumbent_score or 0.0)
        return PromotionDecision(action="promote", served_version=candidate.version, served=candidate, **common,
                                 cost=improvement_cost(costs, gain), reason=f"{verdict}: the canary holds")
    return PromotionDecision(action="reject", served_version=latest.served_version, served=latest.served, **common,
                             reason=f"{verdict}: the canary fails; learning continues from v{latest.served_version}")


def built_on_rejected(ledger: PromotionLedger, candidate: PlaybookVersion, *, now: datetime,
                      rule: PromotionRule) -> PromotionDecision | None:
    """A reject, without evaluation, of a candidate built on a candidate that its canary rejected (built while that
    canary ran); None otherwise, and None when agents were served the parent since (an operator promoted it: the
    reducer then builds on it, and what is built on it is evaluated as usual)."""
    parent = ledger.decision_on(candidate.playbook_id, candidate.parent_version)
    if parent is None or parent.action != "reject" or candidate.parent_version == parent.served_version:
        return None
    if candidate.parent_version in ledger.served_history.get(candidate.playbook_id, ()):
        return None
    return PromotionDecision(
        playbook_id=candidate.playbook_id, decision_id=ledger.next_id(candidate.playbook_id), action="reject",
        candidate_version=candidate.version, candidate_hash=candidate.content_hash,
        served_version=parent.served_version, served=parent.served, previous_version=parent.served_version,
        rule=rule.describe(), by=PROMOTER, decided_at=now,
        reason=f"built on v{candidate.parent_version}, which was rejected: learning continues from "
        f"v{parent.served_version}")


def operator_decision(
    ledger: PromotionLedger,
    action: str,
    version: PlaybookVersion | None,
    *,
    playbook_id: str,
    by: str,
    why: str,
    rule: PromotionRule,
    now: datetime,
    running: int | None = None,
    newest: int | None = None,
) -> PromotionDecision:
    """An operator's ``promote`` (serves ``version``, resumes automatic promotion) or ``rollback`` (serves
    ``version``, pauses automatic promotion until the next operator promote). ``running``: the version agents run
    now when the pointer does not say it, and ``newest`` the newest version (promotion off:
    ``combee_core.guard.rule``)."""
    if action not in ("operator-promote", "rollback"):
        raise PromotionError(f"unknown operator action {action!r}")
    decided: Literal["operator-promote", "rollback"] = "rollback" if action == "rollback" else "operator-promote"
    served_version = version.version if version is not None else 0
    verb = "promoted" if action == "operator-promote" else "rolled back to"
    return PromotionDecision(
        playbook_id=playbook_id, decision_id=ledger.next_id(playbook_id), action=decided,
        candidate_version=None if action == "rollback" else (served_version or None),
        candidate_hash=version.content_hash if version is not None else None, served_version=served_version,
        served=version, previous_version=ledger.served_version(playbook_id) if running is None else running,
        rule=rule.describe(), newest_version=newest,
        reason=f"{by} {verb} v{served_version}" + (f": {why}" if why else ""), paused=action == "rollback",
        by=by, decided_at=now)


def rollback_target(ledger: PromotionLedger, playbook_id: str) -> int:
    """The version served before the current one (the default of ``combee rollback``)."""
    history = ledger.served_history.get(playbook_id, [0])
    if len(history) < 2:
        raise PromotionError(f"{playbook_id}: only v{history[-1]} has been served, nothing to roll back to")
    return history[-2]


def compare_decisions(recorded: Iterable[PromotionDecision], replayed: Iterable[PromotionDecision]) -> str | None:
    """None when the promoter's decisions (those that count, operators' left out: they are not replayed) are the
    same in both, field for field but the time; else the first difference, in words. Only the recorded decisions up
    to the last one the replay made are compared (a partial replay stops earlier)."""
    def automatic(decisions: Iterable[PromotionDecision]) -> list[PromotionDecision]:
        return [d for d in load_ledger_decisions(decisions) if d.by == PROMOTER]

    mine, theirs = automatic(recorded), automatic(replayed)
    if len(theirs) > len(mine):
        return f"the replay made {len(theirs)} promotion decisions, the recording {len(mine)}"
    for a, b in zip(mine, theirs):
        if a.decision_hash() != b.decision_hash():
            return (f"decision on {a.playbook_id} v{a.candidate_version}: recorded {a.action} ({a.reason}), "
                    f"replayed {b.action} ({b.reason})")
    return None if len(theirs) == len(mine) or theirs else "the replay made no promotion decision"


def load_ledger_decisions(decisions: Iterable[PromotionDecision]) -> list[PromotionDecision]:
    """The decisions that count, in log order."""
    ledger = PromotionLedger()
    return [d for d in decisions if ledger.apply(d)]


# ---------------------------------------------------------------------------------------------- learning


@dataclass(frozen=True)
class NextBase:
    """What the reducer builds the next version on: the served version's entries (the latest candidate's when it
    was promoted) and the version number they come from."""

    parent_version: int
    entries: list[PlaybookEntry] | None
    """None: the latest candidate's own entries (it is served, or promotion is off)."""


def next_base(ledger: PromotionLedger, playbook_id: str, latest_version: int) -> NextBase | None:
    """Base of version ``latest_version + 1``: None while the latest candidate awaits its decision. A rejected (or
    held) candidate is not built on: the next version starts from the version served after that decision. The
    *first* decision on the candidate counts, so a canary's verdict, whenever it comes, never changes the base: a
    candidate in canary is built on, and if its canary then fails, the version built on it is rejected unevaluated
    (``built_on_rejected``) and the one after starts from the served version."""
    if latest_version == 0:
        return NextBase(parent_version=0, entries=None)
    decision = ledger.first_on_candidate.get(playbook_id, {}).get(latest_version)
    if decision is None:
        return None
    if decision.served_version == latest_version or decision.action == "canary":
        return NextBase(parent_version=latest_version, entries=None)  # a candidate in canary is built on, tentatively
    served = decision.served
    return NextBase(parent_version=decision.served_version, entries=list(served.entries) if served else [])
