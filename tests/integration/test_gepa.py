"""GEPA's own optimisation loop with Combee Streams as its proposer (embedded broker, simulated LLM, offline)."""

from __future__ import annotations

import asyncio

import pytest

gepa = pytest.importorskip("gepa")
from gepa.core.adapter import EvaluationBatch  # noqa: E402

from combee_core.llm.simulator import format_lesson  # noqa: E402
from combee_core.runs.ace_format import parse_ace, render_ace  # noqa: E402
from combee_core.sim.suite import Task, TaskSuite  # noqa: E402
from combee_core.sim.task_suite import build_suite, holds_insight, success_probability  # noqa: E402
from streams.runs.gepa_bridge import CombeeProposer  # noqa: E402
from streams.topology.pipeline import InProcessPipeline  # noqa: E402
from tests.integration.topology_support import run_settings  # noqa: E402

pytestmark = [pytest.mark.integration]


class SuiteAdapter:
    """A toy GEPA adapter: the component is a playbook in ACE text; a task scores the (noise-free) success
    probability the simulated suite gives it with that playbook; a task whose insight is missing says so in its
    feedback, as an agent's grader would."""

    propose_new_texts = None

    def __init__(self, suite: TaskSuite) -> None:
        self.suite = suite

    def evaluate(self, batch: list[Task], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        text = candidate["playbook"]
        entries = parse_ace(text).entries(1) if text.strip() else []
        scores, trajectories = [], []
        for task in batch:
            family = self.suite.family(task.family_id)
            held = holds_insight(family, entries)
            scores.append(success_probability(self.suite, task, entries))
            feedback = "Correct." if held else f"Wrong answer.\n{format_lesson(family.section, family.insight)}"
            trajectories.append({"Inputs": task.prompt, "Generated Outputs": "(simulated answer)",
                                 "Feedback": feedback, "Score": scores[-1]})
        return EvaluationBatch(outputs=[None] * len(batch), scores=scores,
                               trajectories=trajectories if capture_traces else None)

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        return {component: list(eval_batch.trajectories) for component in components_to_update}


@pytest.mark.slow
async def test_gepa_optimises_a_playbook_through_the_pipeline(kafka, unique_prefix):
    suite = build_suite(families=6, train_per_family=4, held_out_per_family=2, seed=3)
    settings = run_settings(unique_prefix, batch_size=6, max_wait_s=1.0)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        proposer = CombeeProposer(settings, kafka.bootstrap, kafka.profile, asyncio.get_running_loop(),
                                  timeout_s=120)
        result = await asyncio.to_thread(
            gepa.optimize,
            seed_candidate={"playbook": ""},
            trainset=list(suite.train),
            valset=list(suite.held_out),
            adapter=SuiteAdapter(suite),
            custom_candidate_proposer=proposer,
            reflection_minibatch_size=6,
            max_metric_calls=80,
            seed=0,
            display_progress_bar=False,
            raise_on_exception=True,
        )
        versions = await run.versions()
    assert proposer.proposals >= 1 and proposer.versions
    print(f"GEPA: {proposer.proposals} proposal(s), val scores {result.val_aggregate_scores}")
    seed_score = result.val_aggregate_scores[0]
    best = result.val_aggregate_scores[result.best_idx]
    assert best > seed_score, (seed_score, result.val_aggregate_scores)
    best_text = result.best_candidate["playbook"]
    learned = parse_ace(best_text).entries(1)
    assert any(holds_insight(family, learned) for family in suite.families)
    assert best_text in {render_ace(version.entries) for version in proposer.versions}  # a version Combee made
    assert all(v.playbook_id == "gepa-playbook" for v in versions)
