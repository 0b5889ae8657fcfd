"""The LLM judge as one score function (``combee_client.evaluator`` turns it into the evaluator process): run the
task's input with the candidate playbook on the agent model, then judge the answer against the task's expected
answer or rubric with the judge model. What the calls cost is summed in :attr:`LLMJudge.usage`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from combee_core.errors import CombeeError
from combee_core.judge.calls import JudgeRoles, Verdict
from combee_core.judge.prompts import PROMPT_VERSION
from combee_core.models import HeldOutTask, Usage
from combee_core.promote.evaluation import CandidatePlaybook, Scored

log = logging.getLogger(__name__)

EVALUATOR_NAME = "llm-judge"


class NothingToJudgeBy(CombeeError, ValueError):
    """A task with neither an expected answer nor a rubric: the judge has nothing to compare the answer with."""


@dataclass
class JudgeUsage:
    """What the judge's calls cost since it started, per role (as the promoter counts the proposers' calls)."""

    agent: Usage = field(default_factory=Usage)
    judge: Usage = field(default_factory=Usage)

    @property
    def total(self) -> Usage:
        return self.agent + self.judge

    def line(self) -> str:
        total = self.total
        return (f"{total.calls} LLM calls ({self.agent.calls} agent, {self.judge.calls} judge), "
                f"{total.prompt_tokens + total.completion_tokens} tokens, ${total.cost_usd:.6f}")


@dataclass(frozen=True)
class Judged:
    """One task judged: the agent's answer and the verdict."""

    task_id: str
    answer: str
    answer_usage: Usage
    verdict: Verdict


class LLMJudge:
    """``await judge.score(playbook, task)`` -> the judge's score in [0, 1] (see the module docstring)."""

    def __init__(self, roles: JudgeRoles) -> None:
        self.roles = roles
        self.usage = JudgeUsage()

    @property
    def evaluator_model(self) -> str:
        """What each result names as its evaluator model: the judge, the agent it judged, the prompts' version."""
        config = self.roles.judge_config
        return f"{config.judge.model} judging {config.agent.model} ({PROMPT_VERSION})"

    async def judged(self, playbook: CandidatePlaybook, task: HeldOutTask) -> Judged:
        """Run and judge one task (raises ``LLMError`` once a call's retries are spent, :class:`NothingToJudgeBy`
        for a task with no expected answer or rubric)."""
        if task.expected is None and task.rubric is None:
            raise NothingToJudgeBy(f"task {task.task_id} has no expected answer or rubric to judge the answer by")
        answer = await self.roles.run_agent(task.input, playbook.render())
        self.usage.agent += answer.usage
        verdict = await self.roles.judge(task, answer.text)
        self.usage.judge += verdict.usage
        log.debug("judged %s v%d task %s: %.2f (%s)", playbook.playbook_id, playbook.version, task.task_id,
                  verdict.score, verdict.reason)
        return Judged(task.task_id, answer.text, answer.usage, verdict)

    async def score(self, playbook: CandidatePlaybook, task: HeldOutTask) -> Scored:
        """The score function ``combee_client.evaluator`` runs: the verdict's score, with what both calls cost."""
        judged = await self.judged(playbook, task)
        return Scored(judged.verdict.score, judged.answer_usage + judged.verdict.usage)
