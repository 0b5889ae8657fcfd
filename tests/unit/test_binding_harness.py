"""A binding unit-tested over in-memory topics (``streams.testing.binding_harness``): the built-in evaluator's stage
(``streams.topology.stages.evaluate``) answers each request on its input with a result, dead-letters what it cannot
read, commits past both once the result is stored, and leaves a revoked partition's requests to its next owner."""

from __future__ import annotations

from datetime import UTC, datetime

from combee_core.models import DeadLetter, EvalResult
from combee_core.promote.promotion import eval_requests
from combee_core.promote.task_sets import pinned_tasks
from combee_core.settings import CombeeSettings
from combee_core.sim.task_set import SUITE_SET, suite_tasks
from combee_core.sim.task_suite import build_suite, success_probability
from combee_core.topology import Topic
from streams.testing.binding_harness import BindingHarness
from streams.topology.stages.evaluate import EvaluatorStage
from tests.unit.test_promoter_resume import task_set

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = CombeeSettings.load(env={"COMBEE_EVAL_SUITE_FAMILIES": "4", "COMBEE_EVAL_SUITE_SEED": "3"})


def _requests(playbook_id: str, count: int):
    suite = build_suite(families=SETTINGS.eval_suite_families, seed=SETTINGS.eval_suite_seed)
    return suite, eval_requests(playbook_id, 1, [], pinned_tasks(task_set(SUITE_SET, suite_tasks(suite)))[:count], NOW)


async def test_each_request_gets_its_result_a_bad_record_a_dead_letter_and_both_are_committed():
    suite, [request] = _requests("demo", 1)
    async with BindingHarness(EvaluatorStage, SETTINGS) as harness:
        await harness.put(request, key="demo")
        await harness.put(b"not json", key="demo")
        [result] = harness.values(Topic.EVAL_RESULTS, EvalResult)
        assert result.request_id == request.request_id
        assert result.score == success_probability(suite, suite.held_out[0], [])
        [letter] = harness.values(Topic.DLQ, DeadLetter)
        assert letter.stage == "evaluate" and letter.offset == 1 and letter.reason.startswith("unreadable ")
        assert await harness.commit() == {harness.stage.owner_partition("demo"): 2}
        assert harness.ctx.counters["evaluations"] == 1


async def test_requests_of_a_partition_taken_away_are_left_to_its_next_owner():
    _, [request] = _requests("demo", 1)
    async with BindingHarness(EvaluatorStage, SETTINGS, partitions=2, owned=(0, 1)) as harness:
        await harness.revoke(1)
        await harness.put(request, key="demo", partition=1)
        assert harness.sent(Topic.EVAL_RESULTS) == []
        assert await harness.commit() == {}
        await harness.assign(1)  # given back: its state rebuilt, it is owned again
        await harness.put(request, key="demo", partition=1)
        assert len(harness.sent(Topic.EVAL_RESULTS)) == 1
