"""The LLM judge evaluator (combee_core.judge): the simulated agent and judge follow their documented model
(docs/simulator.md), the judge's output is read leniently but never guessed, its prompts are versioned, its calls
replay, and its settings fail in one line."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from combee_core.judge import prompts
from combee_core.judge.calls import JudgeRoles, parse_verdict
from combee_core.judge.prompts import PROMPT_VERSION
from combee_core.judge.score import LLMJudge, NothingToJudgeBy
from combee_core.judge.settings import JudgeConfigError, JudgeSettings
from combee_core.llm.errors import LLMOutputError
from combee_core.llm.record import CallIndex, LLMRecordMiss, ReplayResponder
from combee_core.llm.sim_judge import AGENT_SLIP_RATE, JUDGE_ERROR_RATE, REFUSAL, SLIP, simulate_agent, simulate_judge
from combee_core.models import CallRecord, HeldOutTask, PlaybookEntry, entries_digest
from combee_core.promote.evaluation import CandidatePlaybook

RULE = "For leap years (R08), count the end date as included."
HARMFUL = "For leap years (R08), skip the check and guess the answer."
TASK = HeldOutTask(task_id="t1", input="Task 3 of family R08: days from 2024-02-01 to 2024-03-01?",
                   expected="count the end date as included")
SIM = {"judge_model": "combee-sim/judge", "agent_model": "combee-sim/agent"}


def playbook(*contents: str) -> CandidatePlaybook:
    entries = [PlaybookEntry(entry_id=f"dates-{i}", section="dates", content=c, created_version=1, updated_version=1)
               for i, c in enumerate(contents)]
    return CandidatePlaybook("pb", 1, tuple(entries), entries_digest(entries))


def agent(text: str, task_input: str = TASK.input, seed: int = 0) -> str:
    return simulate_agent({"task": "agent", "input": task_input, "playbook": text}, seed)


def test_the_simulated_agent_answers_with_the_rule_it_holds_and_does_not_know_without_one():
    assert agent(playbook(RULE).render()) == "count the end date as included"
    assert agent(playbook().render()) == REFUSAL
    assert agent(playbook("For currency amounts (R03), round money.").render()) == REFUSAL
    assert agent(playbook(HARMFUL).render()) == "skip the check and guess the answer"
    assert agent(playbook(RULE).render(), task_input="What is 2 + 2?") == REFUSAL  # no family: no rule key


def test_the_simulated_agent_follows_either_of_two_rules_and_slips_at_its_documented_rate():
    both = playbook(RULE, HARMFUL).render()
    answers = [agent(both, f"Task {n} of family R08: a question.") for n in range(2000)]
    followed_rule = sum(a == "count the end date as included" for a in answers) / len(answers)
    slips = sum(a == SLIP for a in answers) / len(answers)
    assert 0.42 <= followed_rule <= 0.49  # 1/2 of the 0.95 that did not slip
    assert abs(slips - AGENT_SLIP_RATE) <= 0.015


def test_the_simulated_judge_compares_with_the_expected_answer_and_errs_at_its_documented_rate():
    verdicts = [simulate_judge({"input": f"q{n}", "answer": "count the end date as included.",
                                "expected": "Count the end date as included"}, seed=0) for n in range(3000)]
    wrong = [simulate_judge({"input": f"q{n}", "answer": REFUSAL, "expected": "count the end date as included"},
                            seed=0) for n in range(3000)]
    flipped = sum(v["verdict"] == "incorrect" for v in verdicts) + sum(v["verdict"] == "correct" for v in wrong)
    assert abs(flipped / 6000 - JUDGE_ERROR_RATE) <= 0.015
    assert all(v["score"] == (1.0 if v["verdict"] == "correct" else 0.0) for v in verdicts + wrong)
    same = {"input": "q1", "answer": "x", "expected": "y"}
    assert simulate_judge(same, 3) == simulate_judge(dict(same), 3)  # the same call, the same verdict


@pytest.mark.parametrize(("text", "expected"), [
    ('{"verdict": "correct", "score": 0.8, "reason": "close"}', (0.8, True)),
    ('Sure! ```json\n{"verdict": "incorrect", "reason": "no"}\n```', (0.0, False)),
    ('{"score": 1}', (1.0, True)),
])
def test_a_verdict_is_read_from_the_judges_json(text, expected):
    score, correct, _ = parse_verdict(text).value
    assert (score, correct) == expected


@pytest.mark.parametrize("text", ["", "The answer is right.", '{"verdict": "maybe"}', '{"score": 7}'])
def test_text_with_no_verdict_is_an_output_error_never_a_guess(text):
    with pytest.raises(LLMOutputError):
        parse_verdict(text)


PROMPT_DIGESTS = {"judge-prompts-1": "f667a30784abfcac"}
"""sha256[:16] of the prompts' texts per version: a changed text with the same version fails here (bump it)."""


def test_the_prompts_text_is_pinned_to_their_version():
    digest = hashlib.sha256((prompts.AGENT_SYSTEM + prompts.JUDGE_SYSTEM).encode()).hexdigest()[:16]
    assert PROMPT_DIGESTS.get(PROMPT_VERSION) == digest, f"prompts changed: bump PROMPT_VERSION ({digest})"


def test_every_call_is_recorded_under_its_role_and_a_replay_answers_the_same_without_the_model():
    records: list[CallRecord] = []
    judge = LLMJudge(JudgeRoles(JudgeSettings.load(SIM, environ={}).llm_config(), on_call=records.append))
    candidates = [playbook(), playbook(RULE), playbook(RULE, HARMFUL)]
    scores = [asyncio.run(judge.score(p, TASK)) for p in candidates]
    assert [r.role for r in records] == ["agent", "judge"] * 3
    assert all(r.params["prompt_version"] == PROMPT_VERSION and r.usage.cost_usd > 0 for r in records)
    assert judge.usage.total.calls == 6 and judge.usage.agent.calls == 3

    responder = ReplayResponder(CallIndex(records))
    replayed = LLMJudge(JudgeRoles(JudgeSettings.load(SIM, environ={}).llm_config(), responder=responder))
    assert [asyncio.run(replayed.score(p, TASK)) for p in candidates] == scores
    assert responder.answered == 6 and not responder.misses
    with pytest.raises(LLMRecordMiss):  # a task the record does not hold is never sent to a model
        asyncio.run(replayed.score(playbook(RULE), TASK.model_copy(update={"input": "Task 9 of family R08: ?"})))


def test_a_task_with_nothing_to_judge_by_is_an_error_before_any_call():
    records: list[CallRecord] = []
    judge = LLMJudge(JudgeRoles(JudgeSettings.load(SIM, environ={}).llm_config(), on_call=records.append))
    with pytest.raises(NothingToJudgeBy, match="task t1 has no expected answer or rubric"):
        asyncio.run(judge.score(playbook(RULE), TASK.model_copy(update={"expected": None})))
    assert records == []


@pytest.mark.parametrize(("values", "env", "message"), [
    ({}, {}, "no judge model: set COMBEE_JUDGE_MODEL or --judge-model"),
    ({"judge_model": "combee-sim/j"}, {}, "no agent model: set COMBEE_JUDGE_AGENT_MODEL or --agent-model"),
    (SIM, {"COMBEE_JUDGE_TIMEOUT_S": "0"}, "COMBEE_JUDGE_TIMEOUT_S: Input should be greater than 0"),
    ({**SIM, "agent_model": "my agent"}, {}, "COMBEE_JUDGE_AGENT_MODEL: Value error, 'my agent' is not a litellm "
     "model name (e.g. openai/gpt-4o-mini, combee-sim/judge)"),
])
def test_bad_settings_are_one_line_naming_the_variable(values, env, message):
    with pytest.raises(JudgeConfigError) as raised:
        JudgeSettings.load(values, environ=env)
    assert str(raised.value) == message


def test_the_environment_sets_the_models_and_flags_override_it():
    env = {"COMBEE_JUDGE_MODEL": "openai/gpt-4o", "COMBEE_JUDGE_AGENT_MODEL": "ollama/qwen2.5"}
    settings = JudgeSettings.load({"agent_model": "combee-sim/agent", "timeout_s": None}, environ=env)
    config = settings.llm_config()
    assert (config.judge.model, config.agent.model, config.judge.timeout_s) == (
        "openai/gpt-4o", "combee-sim/agent", 120.0)


def test_combee_judge_refuses_a_missing_model_in_one_line_before_asking_for_a_broker(monkeypatch, capsys):
    from combee_core.judge.score import EVALUATOR_NAME
    from streams.cli import main
    from streams.cli.judge import EVALUATOR_NAME as CLI_DEFAULT_NAME

    assert CLI_DEFAULT_NAME == EVALUATOR_NAME
    for name in ("COMBEE_JUDGE_MODEL", "COMBEE_JUDGE_AGENT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["judge", "--agent-model", "combee-sim/agent", "--bootstrap", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == "combee judge: no judge model: set COMBEE_JUDGE_MODEL or --judge-model\n"


def test_a_judge_call_that_keeps_failing_raises_after_its_retries_so_the_evaluator_answers_an_error():
    from combee_core.llm.errors import LLMCallError
    from combee_core.llm.simulator import SimulatorConfig

    settings = JudgeSettings.load({**SIM, "max_retries": 1}, environ={})
    config = settings.llm_config().model_copy(update={"simulator": SimulatorConfig(fail_first_n=5)})
    config = config.model_copy(update={"agent": config.agent.model_copy(update={"backoff_s": 0.0}),
                                       "judge": config.judge.model_copy(update={"backoff_s": 0.0})})
    records: list[CallRecord] = []
    judge = LLMJudge(JudgeRoles(config, on_call=records.append))
    with pytest.raises(LLMCallError, match="503"):
        asyncio.run(judge.score(playbook(RULE), TASK))
    assert [(r.role, r.attempt, r.error is not None) for r in records] == [("agent", 1, True), ("agent", 2, True)]
