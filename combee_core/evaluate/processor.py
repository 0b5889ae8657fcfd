"""The built-in evaluator's answers: each ``EvalRequest`` of the simulated task suite gets an ``EvalResult`` with the
suite's expected success probability of that task with that playbook (no LLM), or an error naming what is missing.

It scores only the playbooks it is told are the suite's (``builtin_evaluator_playbooks``, default the demo's): for
any other playbook the score would not depend on what the playbook teaches, so every candidate would tie and be
promoted. Their requests get an error result saying which evaluators exist and how to plug one in
(:func:`refusal`), and the promoter rejects the candidate with that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from combee_core.models import EvalRequest, EvalResult
from combee_core.processors.effects import Count, Effect, Publish, acknowledge
from combee_core.sim.suite import TaskSuite
from combee_core.sim.task_suite import success_probability, task_by_id
from combee_core.topology import Topic

log = logging.getLogger(__name__)

EVALUATOR = "combee-builtin"
EVERY_PLAYBOOK = "*"


def parse_playbooks(spec: str) -> frozenset[str] | None:
    """``"demo,pb"`` -> those ids; ``"*"`` -> None (every playbook)."""
    ids = frozenset(part.strip() for part in spec.split(",") if part.strip())
    return None if EVERY_PLAYBOOK in ids else ids


def refusal(playbook_id: str) -> str:
    """Why the built-in evaluator does not score ``playbook_id``, and what to do instead (one line)."""
    return (f"the built-in evaluator scores the synthetic task suite of the demo and benchmarks, not playbook "
            f"{playbook_id!r}: its score would not depend on what the playbook teaches, so every candidate would tie "
            f"and be promoted. Plug in your own metric: an evaluator that answers eval-requests with eval-results "
            f"(docs/protocol.md, 'Writing an evaluator'; examples/node/evaluator.js), with workers run without the "
            f"evaluate stage; or, to score it on the synthetic suite anyway, set COMBEE_BUILTIN_EVALUATOR_PLAYBOOKS="
            f"{playbook_id} (or '*')")


class Evaluator:
    def __init__(self, suite: TaskSuite, evaluator_model: str, playbooks: frozenset[str] | None = None) -> None:
        """``playbooks``: the ids it scores (None: every playbook)."""
        self.suite = suite
        self.evaluator_model = evaluator_model
        self.playbooks = playbooks
        self._refused: set[str] = set()

    def answer(self, request: EvalRequest, now: datetime) -> EvalResult:
        task = task_by_id(self.suite, request.task_id)
        common: dict[str, Any] = dict(
            request_id=request.request_id, playbook_id=request.playbook_id, digest=request.digest,
            task_id=request.task_id, task_set=request.task_set, evaluator=EVALUATOR,
            evaluator_model=self.evaluator_model, evaluated_at=now)
        if self.playbooks is not None and request.playbook_id not in self.playbooks:
            if request.playbook_id not in self._refused:  # once per playbook: the result carries it every time
                self._refused.add(request.playbook_id)
                log.error("refused to score %s: %s", request.playbook_id, refusal(request.playbook_id))
            return EvalResult(**common, error=refusal(request.playbook_id))
        if task is None:
            return EvalResult(**common, error=f"task {request.task_id} is not in the suite "
                              f"(seed {self.suite.seed}, {len(self.suite.families)} families)")
        return EvalResult(**common, score=success_probability(self.suite, task, request.entries))

    def take(self, requests: Sequence[tuple[EvalRequest, object]], now: datetime) -> list[Effect]:
        """The requests of one fetch (with their tokens): a result each, then one acknowledgement of them all."""
        effects: list[Effect] = []
        for request, _ in requests:
            result = self.answer(request, now)
            if result.error and result.error != refusal(request.playbook_id):
                log.warning("evaluation of %s failed: %s", request.request_id, result.error)
            effects += [Publish(Topic.EVAL_RESULTS, request.playbook_id, result), Count("evaluations")]
        return [*effects, *acknowledge([token for _, token in requests])]
