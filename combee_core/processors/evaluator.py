"""The built-in evaluator's answers: each ``EvalRequest`` of the simulated task suite gets an ``EvalResult`` with the
suite's expected success probability of that task with that playbook (no LLM), or an error naming what is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from combee_core.models import EvalRequest, EvalResult
from combee_core.processors.effects import Count, Effect, Publish, acknowledge
from combee_core.tasks import TaskSuite, success_probability, task_by_id
from combee_core.topology import Topic

log = logging.getLogger(__name__)

EVALUATOR = "combee-builtin"


class Evaluator:
    def __init__(self, suite: TaskSuite, evaluator_model: str) -> None:
        self.suite = suite
        self.evaluator_model = evaluator_model

    def answer(self, request: EvalRequest, now: datetime) -> EvalResult:
        task = task_by_id(self.suite, request.task_id)
        common: dict[str, Any] = dict(
            request_id=request.request_id, playbook_id=request.playbook_id, digest=request.digest,
            task_id=request.task_id, evaluator=EVALUATOR, evaluator_model=self.evaluator_model, evaluated_at=now)
        if task is None:
            return EvalResult(**common, error=f"task {request.task_id} is not in the suite "
                              f"(seed {self.suite.seed}, {len(self.suite.families)} families)")
        return EvalResult(**common, score=success_probability(self.suite, task, request.entries))

    def take(self, requests: Sequence[tuple[EvalRequest, object]], now: datetime) -> list[Effect]:
        """The requests of one fetch (with their tokens): a result each, then one acknowledgement of them all."""
        effects: list[Effect] = []
        for request, _ in requests:
            result = self.answer(request, now)
            if result.error:
                log.warning("evaluation of %s failed: %s", request.request_id, result.error)
            effects += [Publish(Topic.EVAL_RESULTS, request.playbook_id, result), Count("evaluations")]
        return [*effects, *acknowledge([token for _, token in requests])]
