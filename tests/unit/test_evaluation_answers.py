"""What an evaluator built from a score function answers (``combee_core.promote.evaluation``): its score, or an error
result naming why (raised, not a number, outside [0, 1]); the task and playbook it reads; repeats not rescored."""

from __future__ import annotations

import math

from combee_core.models import EvalResult, HeldOutTask, PlaybookEntry, Usage
from combee_core.promote.evaluation import AnsweredRequests, Scored, answer, request_playbook, request_task
from combee_core.promote.promotion import eval_requests
from combee_core.promote.task_sets import pinned_tasks
from tests.unit.test_promoter_resume import NOW, task_set

TASK = HeldOutTask(task_id="fr", input="Capital of France?", expected="Paris", rubric="one word",
                   metadata={"region": "europe"})
ENTRIES = [PlaybookEntry(entry_id="e1", section="lookup", content="Use the atlas.", created_version=1,
                         updated_version=1)]
REQUEST = eval_requests("pb", 1, ENTRIES, pinned_tasks(task_set("capitals", [TASK])), NOW)[0]


def _answer(outcome: float | BaseException | object) -> EvalResult:
    return answer(REQUEST, outcome, evaluator="mine", evaluator_model="agent-v1", now=NOW)  # type: ignore[arg-type]


def test_the_function_reads_the_task_and_the_playbook_the_request_carries():
    assert request_task(REQUEST) == TASK
    playbook = request_playbook(REQUEST)
    assert playbook.entries == tuple(ENTRIES) and playbook.version == 1
    assert playbook.render() == "## lookup\n[e1] helpful=0 harmful=0 :: Use the atlas."


def test_a_score_is_answered_with_the_requests_ids_and_its_task_set_echoed():
    result = _answer(0.75)
    assert (result.score, result.error, result.task_set, result.request_id) == (0.75, "", "capitals@1",
                                                                                 REQUEST.request_id)
    assert (result.evaluator, result.evaluator_model) == ("mine", "agent-v1")
    assert _answer(1).score == 1.0


def test_a_score_with_its_cost_puts_the_cost_in_the_result_and_is_checked_like_a_number():
    """A score function that calls models (the LLM judge) returns ``Scored``: the result carries what it cost."""
    usage = Usage(prompt_tokens=120, completion_tokens=30, cost_usd=0.0002, calls=2)
    result = _answer(Scored(0.5, usage))
    assert (result.score, result.usage, result.error) == (0.5, usage, "")
    assert _answer(0.5).usage is None
    bad = _answer(Scored(2.0, usage))
    assert bad.score is None and "outside [0, 1]" in bad.error


def test_a_failure_or_a_value_that_is_no_score_is_an_error_result_never_a_lost_request():
    for outcome, said in ((RuntimeError("provider down"), "RuntimeError: provider down"),
                          (1.5, "outside [0, 1]"), (-0.1, "outside [0, 1]"), (math.nan, "outside [0, 1]"),
                          (True, "not a number"), ("0.5", "not a number"), (None, "not a number")):
        result = _answer(outcome)
        assert result.score is None and said in result.error, (outcome, result.error)


def test_answered_requests_are_remembered_up_to_a_bound_oldest_forgotten_first():
    answered = AnsweredRequests(most=2)
    for request_id in ("a", "b", "c"):
        answered.add(request_id)
    assert "a" not in answered and "b" in answered and "c" in answered
