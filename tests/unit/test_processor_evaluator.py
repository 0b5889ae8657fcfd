"""The built-in evaluator's answers, without a broker (``combee_core.evaluate.processor``)."""

from __future__ import annotations

from datetime import UTC, datetime

from combee_core.evaluate.processor import Evaluator, parse_playbooks, refusal
from combee_core.models import EvalResult
from combee_core.processors.effects import Acknowledge
from combee_core.processors.testing import EffectLog
from combee_core.promote.promotion import eval_requests
from combee_core.promote.task_sets import pinned_tasks
from combee_core.sim.task_set import SUITE_SET, suite_tasks
from combee_core.sim.task_suite import build_suite, success_probability
from tests.unit.test_promoter_resume import task_set

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_each_request_gets_its_tasks_expected_score_or_an_error_and_the_fetch_is_acknowledged_once():
    suite = build_suite(families=4, seed=3)
    tasks = list(suite.held_out[:2])
    requests = eval_requests("pb", 1, [], pinned_tasks(task_set(SUITE_SET, suite_tasks(suite)))[:2], NOW)
    unknown = requests[0].model_copy(update={"task_id": "no-such-task", "request_id": "pb/x/no-such-task"})
    log = EffectLog()
    effects = log.extend(Evaluator(suite, "sim").take([(r, f"q{n}") for n, r in enumerate([*requests, unknown])], NOW))
    results = log.published("eval-results")
    assert all(isinstance(r, EvalResult) for r in results) and len(results) == 3
    assert [r.score for r in results[:2]] == [success_probability(suite, t, []) for t in tasks]  # type: ignore[attr-defined]
    assert results[2].score is None and "no-such-task is not in the suite" in (results[2].error or "")  # type: ignore[attr-defined]
    assert [e.key for e in log.publishes("eval-results")] == ["pb"] * 3
    assert {r.task_set for r in results} == {"suite@1"}  # type: ignore[attr-defined]  # echoed: the cache's key
    assert effects[-1] == Acknowledge(("q0", "q1", "q2")) and log.counts() == {"evaluations": 3}


def test_a_playbook_not_named_as_the_suites_is_refused_with_how_to_plug_in_an_evaluator():
    suite = build_suite(families=4, seed=3)
    task = suite.held_out[0]
    evaluator = Evaluator(suite, "sim", parse_playbooks("demo, pb"))
    pinned = pinned_tasks(task_set(SUITE_SET, suite_tasks(suite)))[:1]
    refused = eval_requests("support-bot", 1, [], pinned, NOW)[0]
    allowed = eval_requests("pb", 1, [], pinned, NOW)[0]
    answer = evaluator.answer(refused, NOW)
    assert answer.score is None and answer.error == refusal("support-bot")
    for pointer in ("'support-bot'", "docs/protocol.md", "examples/node/evaluator.js",
                    "COMBEE_BUILTIN_EVALUATOR_PLAYBOOKS=support-bot"):
        assert pointer in answer.error
    assert evaluator.answer(allowed, NOW).score == success_probability(suite, task, [])
    # '*' is the explicit "score every playbook on the suite"
    assert Evaluator(suite, "sim", parse_playbooks("*")).answer(refused, NOW).score is not None
    assert parse_playbooks("") == frozenset() and parse_playbooks("a,*") is None
