"""Built-in evaluator: answers ``eval-requests`` for the simulated task suite with ``eval-results``.

A request names a playbook's content (its entries) and one held-out task; the answer is the suite's expected
success probability of that task with that playbook (``combee_core.sim.task_suite.success_probability``: noise-free, no
LLM). Evaluators in other languages answer the same requests (``docs/protocol.md``, ``examples/node/evaluator.js``);
run this stage only where no other evaluator does. It scores only ``builtin_evaluator_playbooks`` (default the
demo's) and refuses the others' requests with an error saying how to plug in an evaluator. The answers are
``combee_core.evaluate.processor``'s. At start it registers the suite's held-out split as the task set ``suite``
(:func:`register_suite`; a new version only when the suite differs), which the default pin scores candidates on.

This stage and the demo are the simulator's entry points into the topology: no other production module imports
``combee_core.sim`` (``tests/unit/test_simulator_layering.py``).
"""

from __future__ import annotations

import logging

from combee_core.evaluate.processor import Evaluator, parse_playbooks
from combee_core.models import TaskSetVersion, utc_now
from combee_core.settings import CombeeSettings
from combee_core.sim.task_set import SUITE_SET, suite_tasks
from combee_core.sim.task_suite import build_suite
from combee_core.topology import EVALUATE
from streams.broker.profile import BrokerProfile
from streams.topology.effects import perform
from streams.topology.runtime import Stage
from streams.topology.stage_records import Delivery
from streams.topology.task_sets import register_task_set

log = logging.getLogger(__name__)


async def register_suite(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> TaskSetVersion:
    """Register the synthetic suite's held-out split (``eval_suite_*``) as the task set ``suite``."""
    suite = build_suite(families=settings.eval_suite_families, seed=settings.eval_suite_seed)
    version, written = await register_task_set(settings, bootstrap, profile, SUITE_SET, suite_tasks(suite),
                                               source=f"build_suite(families={len(suite.families)}, "
                                               f"seed={suite.seed})", by="combee evaluate")
    if written:
        log.info("registered the synthetic suite's held-out split as %s (%d tasks)", version.label,
                 len(version.tasks))
    return version


class EvaluatorStage(Stage):
    spec = EVALUATE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.suite = build_suite(families=ctx.settings.eval_suite_families, seed=ctx.settings.eval_suite_seed)
        self.evaluator = Evaluator(self.suite, self.settings.evaluator_model,
                                   parse_playbooks(self.settings.builtin_evaluator_playbooks))

    async def prepare(self) -> None:
        await register_suite(self.settings, self.ctx.bootstrap, self.ctx.profile)

    async def handle_many(self, deliveries: list[Delivery]) -> None:
        owned = [(d.value, d.record) for d in deliveries if self.owns(d.partition)]
        if owned:
            await perform(self, self.evaluator.take(owned, utc_now()))
