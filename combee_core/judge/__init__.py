"""The built-in LLM judge evaluator (issue 41 item 3): the user's agent model runs each held-out task with the
candidate playbook and a judge model judges the answer, both through litellm, with versioned prompts and every call
recorded for replay. ``combee judge`` (``combee_client.judge``) runs it as an evaluator process."""

from combee_core.judge.calls import JudgeLLMConfig, JudgeRoles, Verdict
from combee_core.judge.prompts import PROMPT_VERSION
from combee_core.judge.score import EVALUATOR_NAME, LLMJudge, NothingToJudgeBy
from combee_core.judge.settings import JudgeConfigError, JudgeSettings

__all__ = ["EVALUATOR_NAME", "PROMPT_VERSION", "JudgeConfigError", "JudgeLLMConfig", "JudgeRoles", "JudgeSettings",
           "LLMJudge", "NothingToJudgeBy", "Verdict"]
