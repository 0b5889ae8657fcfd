"""Where a restarted promoter starts reading its logs: the records its next decisions still rest on, not the whole
logs (issue 27 item 6). :class:`ResumeTracker` keeps the positions; the stage checkpoints them like every view
(``streams.topology.promoter_views``).

What :class:`~combee_core.promote.processor.Promoter` reads, per playbook, with ``F`` its served version and ``D``
the newest candidate decided on (``PromotionLedger.last_decided``; the one in canary while a canary runs):

- ``promoted`` (the ledger): the next decision id (the gate, checkpointed as it is), the latest decision (served
  version and content, paused, the candidate in canary), and ``decision_on`` of the versions a decision looks up:
  ``D`` (``last_decided``), ``F``, and the parent of each undecided candidate (``built_on_rejected``; a parent is
  ``D``, built on tentatively during a canary, or the version served when it was built). A restart reads the log
  from the oldest of those decisions (:attr:`Floors.decision`); every later one is read again, so the ledger it
  rebuilds answers these look-ups as one read from offset 0.
- ``playbook``: the candidates after ``D`` and, for a promotion's improvement cost, every version after ``F`` up to
  the candidate (rejected ones included): versions from ``min(F, D) + 1`` on (:attr:`Floors.version`). The served
  content comes from the latest decision, not from ``playbook``.
- ``batches``: the reflection cost of those versions' batches: manifests from the lowest batch id of the versions
  kept on (:attr:`Floors.batch`; none read yet: after the newest batch a version was read from).
- ``eval-results`` (the cache): the first result of each (content, task) for the contents still to be decided: the
  served content (the incumbent's score), the one in canary (served next if it holds) and the undecided candidates'.
  A result of another content is *droppable* only when the content is known to be a decided candidate's
  (:meth:`Promoter.droppable`): a result of a candidate this process has not read yet is kept, whatever the order in
  which its views advance. A restart starts the log at the first result of the oldest content kept
  (:func:`first_results_resume`).

- ``traces`` (with a canary, every partition, outside any group): a verdict counts the first
  ``canary_min_traces`` scored traces of the candidate in canary and the incumbent's from the candidate's first trace
  on (``canary_verdict``), so a playbook's traces are needed from its first trace of a version not decided yet, or
  of the one in canary (:func:`canary_floor`, :func:`traces_resume`; checkpointed per partition by
  ``streams.topology.views.live_traces``; the guard, which shares that reader, with its own floor: ``Guard.floor``).

A floor only rises while the promoter decides (decisions go in version order, the served version moves to newer
candidates), so what a checkpoint skips stays unneeded. Three things can reach below it, and then a restarted process
does not decide as one that read everything would:

- an operator's ``combee rollback`` (or ``combee promote``) to a version older than ``F`` at the checkpoint: that
  version's held-out results are requested again (a re-evaluation), the improvement cost of the next promotion counts
  only the candidates read, and ``decision_on`` of that version is unknown (a candidate built on a formerly rejected
  version is then evaluated instead of rejected unevaluated);
- an operator's ``combee promote`` of a candidate decided (rejected or held) before the checkpoint, newer than
  ``F``: its results were droppable, so they are requested again (a re-evaluation; nothing else differs);
- a candidate whose content repeats one decided before the checkpoint (e.g. an empty batch on a version that was
  rejected): its results are requested again.

A live promoter drops what it no longer reads (``combee_core.promote.promoter_memory``) and then decides exactly
as one that keeps everything, but in the first case: after an operator serves a version older than ``F``, the next
promotion's improvement cost counts only the candidates it kept, as a restarted promoter's counts only those it read
(that version's results, summarised, are not requested again, and ``decision_on`` is kept).

A re-evaluation never changes a decision already written: decisions are first-of-id-wins, so a second record of an
id is void, and the promoter's write of a taken id loses and it decides again from the ledger. It can change the
*next* decision's scores when the evaluator is not deterministic (an LLM judge; the simulator is): that decision then
rests on the new result where a replay from offset 0 takes the first on the log (``compare_decisions``). These cases
need an operator action or a repeated content after a restart; a run without a restart is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from combee_core.log_order import ResumePoints
from combee_core.models import EvalResult, PlaybookVersion, TaskSetVersion, Usage, entries_digest
from combee_core.promote.improvement_cost import CandidateCost
from combee_core.promote.promotion import PromotionLedger
from combee_core.promote.score_cache import SummarisedScoreCache
from combee_core.promote.task_sets import PinnedTask
from combee_core.topology import Topic


class PromoterState(Protocol):
    """What the resume rules and the memory rules (``promoter_memory``) read of a promoter's state: the attributes
    of :class:`combee_core.promote.processor.Promoter` (which builds on both modules, so they name its state
    through this interface, not its class)."""

    @property
    def ledger(self) -> PromotionLedger: ...

    @property
    def candidates(self) -> dict[str, dict[int, PlaybookVersion]]: ...

    @property
    def costs(self) -> dict[str, dict[int, tuple[CandidateCost, int]]]: ...

    @property
    def digests(self) -> dict[str, dict[int, str]]: ...

    @property
    def held_out(self) -> dict[str, tuple[TaskSetVersion, tuple[PinnedTask, ...]]]: ...

    @property
    def cache(self) -> SummarisedScoreCache: ...

    @property
    def reflection_usage(self) -> dict[str, dict[int, Usage | None]]: ...

    def forget_requests(self, digest: str | None = None) -> None: ...


EMPTY = entries_digest([])
"""The content of every playbook's version 0."""


@dataclass(frozen=True)
class Floors:
    """The oldest records of one playbook a restart must read again (module docstring)."""

    decision: int | None
    """Oldest decision id needed (None: no decision yet)."""
    version: int
    """Versions from this one on."""
    batch: int
    """Manifests from this batch id on."""


def floors(promoter: PromoterState, playbook_id: str) -> Floors:
    ledger = promoter.ledger
    served, decided = ledger.served_version(playbook_id), ledger.last_decided(playbook_id)
    waiting = promoter.candidates.get(playbook_id, {})
    looked_up = {served, decided} | {c.parent_version for v, c in waiting.items() if v > decided}
    ids = [d.decision_id for v in looked_up if (d := ledger.decision_on(playbook_id, v)) is not None]
    latest = ledger.latest.get(playbook_id)
    if latest is not None:
        ids.append(latest.decision_id)
    version = min(served, decided) + 1
    costs = promoter.costs.get(playbook_id, {})
    kept: list[int] = []
    after_newest = 0
    for v in reversed(costs):  # versions are read in order, and batch ids grow with them: the newest first
        after_newest = after_newest or costs[v][1] + 1
        if v < version:
            break
        kept.append(costs[v][1])
    batch = min(kept) if kept else after_newest
    return Floors(decision=min(ids, default=None), version=version, batch=batch)


def needed_digests(promoter: PromoterState) -> set[str]:
    """The contents whose held-out results a decision still rests on: per playbook the served one, the one in
    canary and the undecided candidates'."""
    ledger = promoter.ledger
    needed = set()
    for playbook_id in set(ledger.playbooks()) | set(promoter.candidates) | set(promoter.digests):
        served = ledger.served(playbook_id)
        needed.add(entries_digest(list(served.entries) if served else []))
        canary = ledger.canary(playbook_id)
        if canary is not None:
            needed.add(entries_digest(list(canary.entries)))
        decided = ledger.last_decided(playbook_id)
        needed.update(d for v, d in promoter.digests.get(playbook_id, {}).items() if v > decided)
    return needed


def droppable_digests(promoter: PromoterState) -> set[str]:
    """Contents known to be decided candidates' (or the empty version 0) and not needed (:func:`needed_digests`):
    their results can be skipped by a restart."""
    decided: set[str] = set()
    for playbook_id, digests in promoter.digests.items():
        last = promoter.ledger.last_decided(playbook_id)  # once per playbook: it is a max over its decisions
        decided.update(d for v, d in digests.items() if v <= last)
    return (decided | {EMPTY}) - needed_digests(promoter)


def first_results_resume(first_at: dict[str, int], position: int, droppable: Callable[[str], bool]) -> int:
    """Where ``eval-results`` can be read from again: the first result (``first_at``: digest -> offset of its first
    result) of the oldest content that is not droppable, else ``position``. Droppable contents are forgotten."""
    for digest in [d for d in first_at if droppable(d)]:
        del first_at[digest]
    return min(first_at.values(), default=position)


NUMBERED_LOGS = (Topic.PLAYBOOK, Topic.PROMOTED, Topic.BATCHES)


class ResumeTracker:
    """Where a restart can start each of the promoter's logs: per numbered log, the resume points of the records that
    count (``ResumePoints``, dropped below each playbook's :func:`floors`), and for ``eval-results`` the offset of
    each content's first result."""

    def __init__(self, promoter: PromoterState) -> None:
        self.promoter = promoter
        self.points = {topic: ResumePoints() for topic in NUMBERED_LOGS}
        self.first_at: dict[str, int] = {}

    def took(self, topic: Topic, playbook_id: str, offset: int, number: int) -> None:
        """A record of a numbered log that counts (after the promoter applied it)."""
        self.points[topic].add(playbook_id, offset, number)
        self.forget(playbook_id)

    def took_result(self, result: EvalResult, offset: int) -> None:
        self.first_at.setdefault(result.digest, offset)

    def forget(self, playbook_id: str) -> None:
        """Drop the resume points below the playbook's floors: a restart no longer needs those records."""
        floor = floors(self.promoter, playbook_id)
        if floor.decision is not None:
            self.points[Topic.PROMOTED].drop_below(playbook_id, floor.decision)
        self.points[Topic.PLAYBOOK].drop_below(playbook_id, floor.version)
        self.points[Topic.BATCHES].drop_below(playbook_id, floor.batch)

    def results_resume(self, position: int) -> int:
        """Where ``eval-results`` can be read from again, ``position`` being the view's next offset."""
        return first_results_resume(self.first_at, position, droppable_digests(self.promoter).__contains__)


def canary_floor(promoter: PromoterState, playbook_id: str) -> int:
    """The lowest version whose traces a canary verdict of the playbook can still count: the one in canary, else the
    next undecided candidate (its canary's first trace may come before its decision, from an agent running it)."""
    canary = promoter.ledger.canary(playbook_id)
    return canary.version if canary is not None else promoter.ledger.last_decided(playbook_id) + 1


def traces_resume(traces: Iterable[tuple[int, str, int]], floor: Callable[[str], int], position: int) -> int:
    """Where one partition of ``traces`` can be read from again: its first trace (``(offset, playbook, version)`` in
    partition order) of a version at or above its playbook's ``floor`` (:func:`canary_floor`), else ``position``."""
    return min((offset for offset, playbook_id, version in traces if version >= floor(playbook_id)), default=position)
