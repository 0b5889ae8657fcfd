"""The promoter's cache of held-out results: the first result of each (content digest, task) (``ScoreCache``), and,
once a content has a result for every task of the promoter's held-out set, only its score
(:meth:`SummarisedScoreCache.summarise`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from combee_core.models import EvalResult
from combee_core.promote.promotion import ScoreCache
from combee_core.promote.task_sets import PinnedTask, task_key

Score = tuple[float | None, str, str]
"""(mean score over the tasks, the first error, the evaluator models): what ``ScoreCache.score`` answers."""


@dataclass(frozen=True)
class TaskSet:
    """The task keys (``name@version/task_id``) a summary covers, in the order its mean was taken (one object per
    task set, shared)."""

    order: tuple[str, ...]
    members: frozenset[str]
    ids: frozenset[str] = frozenset()
    """The bare task ids (a result without ``task_set`` counts for any set's task of its id)."""


@dataclass
class SummarisedScoreCache(ScoreCache):
    """A :class:`ScoreCache` in which a content can be summarised (:meth:`summarise`): it then keeps its score
    instead of its results, and :meth:`missing`, :meth:`score` and :meth:`add` answer for it as they did before (its
    first results are final: a later result of the same pair is a repeat)."""

    summaries: dict[str, tuple[TaskSet, Score]] = field(default_factory=dict)
    _task_sets: dict[tuple[str, ...], TaskSet] = field(default_factory=dict, repr=False)

    def add(self, result: EvalResult) -> bool:
        """Keep the first result of each pair; False for a repeat."""
        summary = self.summaries.get(result.digest)
        if summary is not None and (task_key(result.task_set, result.task_id) in summary[0].members
                                    or (not result.task_set and result.task_id in summary[0].ids)):
            return False
        return super().add(result)

    def missing(self, digest: str, tasks: Sequence[PinnedTask]) -> list[PinnedTask]:
        covered = self._covered(digest)
        return [task for task in super().missing(digest, tasks) if task.key not in covered]

    def score(self, digest: str, tasks: Sequence[PinnedTask]) -> Score:
        summary = self.summaries.get(digest)
        if summary is not None:
            task_set, score = summary
            if task_set.order == tuple(task.key for task in tasks):
                return score
            if any(task.key in task_set.members for task in tasks):
                raise ValueError(f"{digest[:16]}: its results are summarised over another task set")
        return super().score(digest, tasks)

    def summarise(self, digest: str, tasks: Sequence[PinnedTask]) -> bool:
        """Replace the content's results of ``tasks`` by its score over them, once it has one for each (True then).
        A content is summarised over one task set (the first complete one); results of other sets' tasks stay."""
        if not tasks or digest in self.summaries or self.missing(digest, tasks):
            return False
        mean, error, models = self.score(digest, tasks)
        order = tuple(task.key for task in tasks)
        task_set = self._task_sets.setdefault(order, TaskSet(order, frozenset(order),
                                                             frozenset(task.task_id for task in tasks)))
        for task in tasks:
            self.drop(digest, task)
        self.summaries[sys.intern(digest)] = (task_set, (mean, error, sys.intern(models)))
        return True

    def _covered(self, digest: str) -> frozenset[str]:
        summary = self.summaries.get(digest)
        return summary[0].members if summary is not None else frozenset()
