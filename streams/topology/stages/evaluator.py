"""Built-in evaluator: answers ``eval-requests`` for the simulated task suite with ``eval-results``.

A request names a playbook's content (its entries) and one held-out task; the answer is the suite's expected
success probability of that task with that playbook (``combee_core.sim.tasks.success_probability``: noise-free, no
LLM). Evaluators in other languages answer the same requests (``docs/protocol.md``, ``examples/node/evaluator.js``);
run this stage only where no other evaluator does. It scores only ``builtin_evaluator_playbooks`` (default the
demo's) and refuses the others' requests with an error saying how to plug in an evaluator. The answers are
``combee_core.processors.evaluator``'s.
"""

from __future__ import annotations

import logging

from combee_core.models import utc_now
from combee_core.processors.evaluator import Evaluator, parse_playbooks
from combee_core.sim.tasks import build_suite
from combee_core.topology import EVALUATE
from streams.topology.effects import perform
from streams.topology.runtime import Stage
from streams.topology.stage_records import Delivery

log = logging.getLogger(__name__)


class EvaluatorStage(Stage):
    spec = EVALUATE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.suite = build_suite(families=ctx.settings.eval_suite_families, seed=ctx.settings.eval_suite_seed)
        self.evaluator = Evaluator(self.suite, self.settings.evaluator_model,
                                   parse_playbooks(self.settings.builtin_evaluator_playbooks))

    async def handle_many(self, deliveries: list[Delivery]) -> None:
        owned = [(d.value, d.record) for d in deliveries if self.owns(d.partition)]
        if owned:
            await perform(self, self.evaluator.take(owned, utc_now()))
