"""What evaluating cost, on a promotion decision (``PromotionDecision.evaluation``): the first result of each task of
the candidate's content and of the incumbent's, summed from the results' ``usage``; results without it are counted
as unreported (unknown), never as zero."""

from __future__ import annotations

from combee_core.models import EvalResult, EvaluationCost, PromotionDecision, Usage, entries_digest
from combee_core.processors.effects import Publish
from combee_core.promote.improvement_cost import describe_evaluation, evaluation_cost
from combee_core.promote.promotion import PromotionRule
from combee_core.promote.score_cache import SummarisedScoreCache
from tests.unit.test_promoter_resume import HELD_OUT, NOW, _nothing, _version, promoter_on


def result(digest: str, task_id: str, usage: Usage | None, score: float = 0.5) -> EvalResult:
    return EvalResult(request_id=task_id, playbook_id="pb", digest=digest, task_id=task_id, score=score,
                      evaluator="judge", evaluator_model="m", usage=usage, evaluated_at=NOW)


def test_the_sum_counts_results_without_usage_as_unreported_not_as_zero() -> None:
    d = "d" * 64
    cost = evaluation_cost([result(d, "a", Usage(calls=2, prompt_tokens=30, completion_tokens=5, cost_usd=0.25)),
                            result(d, "b", None), result(d, "c", Usage(calls=1, prompt_tokens=7, cost_usd=0.5))])
    assert cost == EvaluationCost(results=3, unreported=1, llm_calls=3, prompt_tokens=37, completion_tokens=5,
                                  cost_usd=0.75)
    assert describe_evaluation(cost) == ("evaluation: 3 results, 3 LLM calls, 42 tokens, $0.7500 "
                                         "(+ 1 results of unknown cost)")
    unknown = evaluation_cost([result(d, "a", None)])
    assert (unknown.unreported, describe_evaluation(unknown)) == (
        1, "evaluation: 1 results, cost unknown (no usage reported)")


def test_the_first_result_of_each_task_counts_before_and_after_the_content_is_summarised() -> None:
    cache, tasks, d = SummarisedScoreCache(), HELD_OUT.tasks, "e" * 64
    for task in tasks:
        cache.add(result(d, task.task_id, Usage(calls=2, cost_usd=0.01)))
    cache.add(result(d, tasks[0].task_id, Usage(calls=50, cost_usd=9.0)))  # a repeat: not counted
    before = cache.spend(d, tasks)
    assert (before.results, before.llm_calls, before.cost_usd) == (len(tasks), 2 * len(tasks), 0.01 * len(tasks))
    assert cache.summarise(d, tasks) and not cache.results
    assert cache.spend(d, tasks) == before


async def test_a_decision_carries_what_the_candidates_and_the_incumbents_results_cost() -> None:
    promoter = promoter_on(PromotionRule())
    candidate = _version("pb", 1, 0)
    promoter.apply_version(candidate)
    await promoter.advance("pb", None, NOW, _nothing)  # requests both contents
    for task in HELD_OUT.tasks:
        promoter.apply_result(result(entries_digest(list(candidate.entries)), task.task_id,
                                     Usage(calls=2, prompt_tokens=100, completion_tokens=10, cost_usd=0.002), 0.9))
        promoter.apply_result(result(entries_digest([]), task.task_id, None, 0.1))  # v0: an evaluator that says not
    [decision] = [e.value for e in await promoter.advance("pb", None, NOW, _nothing)
                  if isinstance(e, Publish) and isinstance(e.value, PromotionDecision)]
    n = len(HELD_OUT.tasks)
    assert decision.action == "promote"
    assert decision.evaluation == EvaluationCost(results=2 * n, unreported=n, llm_calls=2 * n, prompt_tokens=100 * n,
                                                 completion_tokens=10 * n, cost_usd=round(0.002 * n, 12))
