"""What an evaluator built from a score function answers (no Kafka): the task and the playbook a request carries, as
the function reads them, and the ``EvalResult`` for what the function returned or raised
(``combee_client.evaluator`` runs it on the topics; docs/protocol.md, "Writing an evaluator")."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from combee_core import limits
from combee_core.errors import CombeeError, one_line
from combee_core.models import EvalRequest, EvalResult, HeldOutTask, PlaybookEntry, Usage
from combee_core.playbook.render import render_entries


class ScoreError(CombeeError, ValueError):
    """A score function's answer that is no score (not a number in [0, 1])."""


@dataclass(frozen=True)
class CandidatePlaybook:
    """The playbook a request asks to score, as an agent would read it."""

    playbook_id: str
    version: int
    entries: tuple[PlaybookEntry, ...]
    digest: str

    def render(self) -> str:
        """The entries as the text an agent's prompt carries (each section's header, then a line an entry)."""
        return render_entries(self.entries)


@dataclass(frozen=True)
class Scored:
    """A score with what it cost: a score function that calls models may return this instead of a bare number (its
    ``usage`` is then in the result)."""

    score: float
    usage: Usage | None = None


def request_task(request: EvalRequest) -> HeldOutTask:
    """The held-out task a request carries (its input, expected answer or rubric, metadata)."""
    return HeldOutTask(task_id=request.task_id, input=request.task_input or request.task_id,
                       expected=request.expected, rubric=request.rubric, metadata=dict(request.task_metadata))


def request_playbook(request: EvalRequest) -> CandidatePlaybook:
    return CandidatePlaybook(request.playbook_id, request.version, tuple(request.entries), request.digest)


def checked_score(value: object) -> float:
    """``value`` as a score, or ``ScoreError`` saying why it is none (a bool, NaN, or outside [0, 1])."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScoreError(f"the score function returned {type(value).__name__} {value!r}, not a number in [0, 1]")
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ScoreError(f"the score function returned {value!r}, outside [0, 1]")
    return float(value)


def answer(request: EvalRequest, outcome: float | Scored | BaseException, *, evaluator: str, evaluator_model: str,
           now: datetime) -> EvalResult:
    """The result for ``request``: its score, or, when the function raised (or returned no score), an ``error``
    result naming why (the promoter rejects the candidate with that reason rather than waiting)."""
    common: dict[str, Any] = dict(request_id=request.request_id, playbook_id=request.playbook_id, digest=request.digest,
                                  task_id=request.task_id, task_set=request.task_set, evaluator=evaluator,
                                  evaluator_model=evaluator_model, evaluated_at=now)
    if isinstance(outcome, BaseException):
        return EvalResult(**common, error=one_line(outcome, limits.MAX_DEAD_LETTER_REASON_CHARS))
    if isinstance(outcome, Scored):
        common["usage"] = outcome.usage
        outcome = outcome.score
    try:
        return EvalResult(**common, score=checked_score(outcome))
    except ScoreError as error:
        return EvalResult(**common, error=str(error)[: limits.MAX_DEAD_LETTER_REASON_CHARS])


class AnsweredRequests:
    """The request ids answered lately (at most ``most``, oldest forgotten first): a request delivered again to
    this process (a rebalance before its commit) is not scored twice. Across processes the promoter keeps the first
    result of each (content, task) pair."""

    def __init__(self, most: int = 100_000) -> None:
        self.most = most
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def add(self, request_id: str) -> None:
        self._ids[request_id] = None
        self._ids.move_to_end(request_id)
        while len(self._ids) > self.most:
            self._ids.popitem(last=False)
