"""The promoter's decisions: per playbook, in version order, which evaluation requests to send for the next
undecided candidate and the served version (those not on ``eval-results`` yet, once per process), and, once every
score is in, the decision by the promotion rule (``combee_core.promote.promotion``); with a canary, the verdict from the
live traces. A decision is a numbered record on ``promoted`` (the first record of each decision id counts).

Its state is what the stage's views read from the logs (``apply_*``, in log order): the candidates (``playbook``),
the ledger (``promoted``), the score cache (``eval-results``) and what each batch's reflections cost (``batches``).
It keeps of them what its next decisions can still read (``combee_core.promote.promoter_memory``), unless made
with ``keep_everything`` (a comparison in tests and benchmarks).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from sys import intern

from combee_core.log_order import ContiguousNumbers
from combee_core.models import (
    BatchManifest,
    EvalResult,
    PlaybookEntry,
    PlaybookVersion,
    PromotionDecision,
    ProposerModels,
    TaskSetVersion,
    Usage,
    entries_digest,
)
from combee_core.processors.effects import Count, Effect, Publish
from combee_core.promote.improvement_cost import CandidateCost
from combee_core.promote.promoter_memory import prune_below_floors, summarise_complete
from combee_core.promote.promotion import (
    LiveScore,
    PromotionLedger,
    PromotionRule,
    built_on_rejected,
    canary_verdict,
    decide,
    eval_requests,
)
from combee_core.promote.score_cache import SummarisedScoreCache
from combee_core.promote.task_sets import PinnedTask, load_registry, pinned_ref, pinned_tasks, unpinned_reason
from combee_core.topology import Topic

log = logging.getLogger(__name__)

CatchUp = Callable[[], Awaitable[None]]


class Promoter:
    """Candidates, evaluation results and decisions in; evaluation requests and decisions out.

    ``pins``: playbook id (or ``*``) -> the held-out task set it is scored on, ``NAME`` or ``NAME@VERSION``
    (``combee_core.promote.task_sets.parse_pins``). A playbook's set is resolved against the ``task-sets`` log
    (:meth:`apply_task_set`) when its first candidate is scored, and kept for the life of the process."""

    def __init__(self, rule: PromotionRule, pins: dict[str, str], proposer: ProposerModels, *,
                 task_sets: Iterable[TaskSetVersion] = (), keep_everything: bool = False) -> None:
        """``task_sets``: records of ``task-sets`` known already (the stage's view adds the log's)."""
        self.rule = rule
        self.pins = dict(pins)
        self.task_sets = load_registry(task_sets)
        self.held_out: dict[str, tuple[TaskSetVersion, tuple[PinnedTask, ...]]] = {}
        """Per playbook, the set version its candidates are scored on (resolved once)."""
        self._waiting_for_set: set[str] = set()
        self.proposer = proposer
        self.ledger = PromotionLedger()
        self.cache = SummarisedScoreCache()
        self.candidates: dict[str, dict[int, PlaybookVersion]] = {}
        self.costs: dict[str, dict[int, tuple[CandidateCost, int]]] = {}
        """Per playbook and version: its own cost (aggregate and reduce calls) and its batch id."""
        self.reflection_usage: dict[str, dict[int, Usage | None]] = {}
        """Per playbook and batch id: what the batch's reflections cost (from its manifest)."""
        self.batches_gate = ContiguousNumbers[str]()
        self.versions_gate = ContiguousNumbers[str](start=1)
        self.digests: dict[str, dict[int, str]] = {}
        """Per playbook and version, its content's digest (what ``droppable`` tells results by)."""
        self._requested: set[tuple[str, str]] = set()
        self.keep_everything = keep_everything
        """Never prune what was read (``promoter_memory``): the same decisions and requests, memory growing."""

    # ------------------------------------------------------------------------------------------ the logs

    def apply_version(self, version: PlaybookVersion) -> bool:
        """A record of ``playbook``; True when it counts (the first of its number)."""
        if not self.versions_gate.accept(version.playbook_id, version.version):
            return False
        digest = intern(entries_digest(list(version.entries)))  # one string with its summary's key
        self.digests.setdefault(version.playbook_id, {})[version.version] = digest
        self.costs.setdefault(version.playbook_id, {})[version.version] = (CandidateCost.of(version), version.batch_id)
        if version.version > self.ledger.last_decided(version.playbook_id):
            self.candidates.setdefault(version.playbook_id, {})[version.version] = version
        return True

    def apply_manifest(self, manifest: BatchManifest) -> bool:
        """A record of ``batches``; True when it counts (the first of its batch id)."""
        if not self.batches_gate.accept(manifest.playbook_id, manifest.batch_id):
            return False
        self.reflection_usage.setdefault(manifest.playbook_id, {})[manifest.batch_id] = manifest.reflection_usage
        return True

    def apply_result(self, result: EvalResult) -> None:
        if self.cache.add(result) and not self.keep_everything:
            summarise_complete(self, result)

    def apply_task_set(self, record: TaskSetVersion) -> bool:
        """A record of ``task-sets``; True when it counts (the first of its name and version)."""
        return self.task_sets.apply(record)

    def tasks_of(self, playbook_id: str) -> tuple[PinnedTask, ...] | str | None:
        """The held-out tasks of the playbook's pinned set; a reason (str) when none is pinned; None while the pinned
        set is not on the ``task-sets`` log yet (logged once)."""
        resolved = self.held_out.get(playbook_id)
        if resolved is not None:
            return resolved[1]
        ref = pinned_ref(self.pins, playbook_id)
        if ref is None:
            return unpinned_reason(playbook_id)
        version = self.task_sets.resolve(ref)
        if version is None:
            if playbook_id not in self._waiting_for_set:
                self._waiting_for_set.add(playbook_id)
                log.warning("%s: its candidates wait for the held-out task set %r (COMBEE_HELD_OUT_SETS), which is "
                            "not registered: `combee tasks add` it, or pin your own set (docs/operations.md, 'Gating "
                            "on your own tasks'; the built-in evaluate stage registers 'suite')", playbook_id, ref)
            return None
        log.info("%s: candidates are scored on the held-out task set %s (%d tasks)", playbook_id, version.label,
                 len(version.tasks))
        self.held_out[playbook_id] = (version, pinned_tasks(version))
        return self.held_out[playbook_id][1]

    def apply_decision(self, decision: PromotionDecision) -> bool:
        """A record of ``promoted``; True when it counts (the first of its decision id)."""
        counts = self.ledger.apply(decision)
        if counts and decision.candidate_version is not None:
            waiting = self.candidates.get(decision.playbook_id, {})
            for version in [v for v in waiting if v <= self.ledger.last_decided(decision.playbook_id)]:
                del waiting[version]
        if counts and not self.keep_everything:
            prune_below_floors(self, decision.playbook_id)
        return counts

    def forget_requests(self, digest: str | None = None) -> None:
        """Newly assigned: requests sent before may have been lost with the previous owner; send them again. With a
        ``digest``: only that content's (summarised: none of its results can be missing again)."""
        if digest is None:
            self._requested.clear()
        else:
            self._requested = {(p, d) for p, d in self._requested if d != digest}

    # ------------------------------------------------------------------------------------------ deciding

    def playbooks(self) -> list[str]:
        """Playbooks with something to decide: an undecided candidate, or a candidate in canary."""
        return sorted(set(self.candidates) | {pb for pb in self.ledger.playbooks()
                                              if self.ledger.canary(pb) is not None})

    def _wanted(self, playbook_id: str, candidate_version: int) -> list[tuple[CandidateCost, int]]:
        served = self.ledger.served_version(playbook_id)
        costs = self.costs.get(playbook_id, {})
        return [costs[v] for v in range(served + 1, candidate_version + 1) if v in costs]

    async def _costs(self, playbook_id: str, candidate_version: int, catch_up: CatchUp) -> list[CandidateCost]:
        """The candidates after the served version up to this one (rejected ones included), each with its batch's
        reflections (a batch's manifest is on the log before its version: the view of ``batches`` is caught up when
        one is missing, so the cost does not depend on timing)."""
        usage = self.reflection_usage.setdefault(playbook_id, {})
        if any(batch_id not in usage for _, batch_id in self._wanted(playbook_id, candidate_version)):
            await catch_up()
        return [cost.plus(usage.get(batch_id)) for cost, batch_id in self._wanted(playbook_id, candidate_version)]

    def _scores(self, playbook_id: str, version: int, entries: list[PlaybookEntry], tasks: Sequence[PinnedTask],
                now: datetime, effects: list[Effect]) -> tuple[float | None, str, str]:
        """The held-out score of this content, after requesting the tasks not yet evaluated (once per process)."""
        digest = entries_digest(entries)
        missing = self.cache.missing(digest, tasks)
        if missing and (playbook_id, digest) not in self._requested:
            self._requested.add((playbook_id, digest))
            for request in eval_requests(playbook_id, version, entries, missing, now):
                effects.append(Publish(Topic.EVAL_REQUESTS, f"{playbook_id}/{request.task_id}", request))
            effects += [Count("eval_requests", len(missing)), Count("eval_cache_hits", len(tasks) - len(missing))]
        return self.cache.score(digest, tasks)

    async def advance(self, playbook_id: str, live: Sequence[LiveScore] | None, now: datetime,
                      catch_up: CatchUp) -> list[Effect]:
        """Decide the candidate in canary once the live traces are in (``live``: None without a canary), else the
        next undecided candidate once its held-out scores are in (requesting them first). ``catch_up`` waits until
        the stage's view of ``batches`` has read the log's current end."""
        in_canary = self.ledger.canary(playbook_id)
        if in_canary is not None:
            if live is None:
                return []
            verdict = canary_verdict(self.rule, self.ledger, playbook_id, live,
                                     costs=await self._costs(playbook_id, in_canary.version, catch_up), now=now)
            return self._decision(verdict) if verdict is not None else []
        candidate = self.candidates.get(playbook_id, {}).get(self.ledger.last_decided(playbook_id) + 1)
        if candidate is None:
            return []
        orphan = built_on_rejected(self.ledger, candidate, now=now, rule=self.rule)
        if orphan is not None:
            return self._decision(orphan)
        tasks = self.tasks_of(playbook_id)
        if tasks is None:
            return []  # waits for `combee tasks add` (logged once)
        if isinstance(tasks, str):
            costs = await self._costs(playbook_id, candidate.version, catch_up)
            return self._decision(decide(self.rule, self.ledger, candidate, candidate_score=None,
                                         incumbent_score=None, error=tasks, costs=costs, task_set="", tasks=0,
                                         proposer=self.proposer, evaluator_model="", now=now))
        effects: list[Effect] = []
        incumbent = self.ledger.served(playbook_id)
        inc_score, inc_error, _ = self._scores(playbook_id, self.ledger.served_version(playbook_id),
                                               list(incumbent.entries) if incumbent else [], tasks, now, effects)
        score, error, evaluator_model = self._scores(playbook_id, candidate.version, list(candidate.entries), tasks,
                                                     now, effects)
        error = error or inc_error
        if not error and (score is None or inc_score is None):
            return effects  # results still coming
        decision = decide(self.rule, self.ledger, candidate, candidate_score=score, incumbent_score=inc_score,
                          error=error, costs=await self._costs(playbook_id, candidate.version, catch_up),
                          task_set=self.held_out[playbook_id][0].label, tasks=len(tasks),
                          proposer=self.proposer, evaluator_model=evaluator_model, now=now)
        return [*effects, *self._decision(decision)]

    @staticmethod
    def _decision(decision: PromotionDecision) -> list[Effect]:
        number = (decision.playbook_id, decision.decision_id)
        return [Publish(Topic.PROMOTED, decision.playbook_id, decision, number=number),
                Count(f"decisions.{decision.action}")]
