"""Built-in evaluator: answers ``eval-requests`` for the simulated task suite with ``eval-results``.

A request names a playbook's content (its entries) and one held-out task; the answer is the suite's expected
success probability of that task with that playbook (``combee_core.tasks.success_probability``: noise-free, no
LLM). Evaluators in other languages answer the same requests (``docs/protocol.md``, ``examples/node/evaluator.js``);
run this stage only where no other evaluator does.
"""

from __future__ import annotations

import logging
from typing import Any

from combee_core.models import EvalRequest, EvalResult, utc_now
from combee_core.tasks import build_suite, success_probability, task_by_id
from streams.runtime import Delivery, Stage

log = logging.getLogger(__name__)

STAGE = "evaluate"
EVALUATOR = "combee-builtin"


class EvaluatorStage(Stage):
    name = STAGE
    consumes = ("eval-requests",)
    input_model = EvalRequest
    input_label = "evaluation request"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.suite = build_suite(families=ctx.settings.eval_suite_families, seed=ctx.settings.eval_suite_seed)

    def answer(self, request: EvalRequest) -> EvalResult:
        task = task_by_id(self.suite, request.task_id)
        common: dict[str, Any]
        common = dict(request_id=request.request_id, playbook_id=request.playbook_id, digest=request.digest,
                      task_id=request.task_id, evaluator=EVALUATOR, evaluator_model=self.settings.evaluator_model,
                      evaluated_at=utc_now())
        if task is None:
            return EvalResult(**common, error=f"task {request.task_id} is not in the suite "
                              f"(seed {self.suite.seed}, {len(self.suite.families)} families)")
        return EvalResult(**common, score=success_probability(self.suite, task, request.entries))

    async def handle_many(self, deliveries: list[Delivery]) -> None:
        answered = []
        for delivery in deliveries:
            record, request = delivery.record, delivery.value
            if not self.owns(delivery.partition):
                continue
            result = self.answer(request)
            if result.error:
                log.warning("evaluation of %s failed: %s", request.request_id, result.error)
            await self.ctx.send("eval-results", request.playbook_id, result)
            answered.append(record)
            self.ctx.count("evaluations")
        if answered:
            await self.ctx.producer.flush()
        for record in answered:
            self.done(record)
