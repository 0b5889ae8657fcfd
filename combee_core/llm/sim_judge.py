"""The simulated agent and judge of the LLM judge evaluator (docs/simulator.md, "The agent and the judge of the LLM
judge evaluator"): pure functions of a call's DATA block, deterministic hash draws, no RNG state."""

from __future__ import annotations

import hashlib
import re
from typing import Any

AGENT_SLIP_RATE = 0.05
"""1 - the suite's ``with_insight_p`` (0.95): an agent holding the rule still fails one task in twenty."""
JUDGE_ERROR_RATE = 0.10
"""Chance the simulated judge flips its verdict (fixed before any run; docs/simulator.md says why)."""
REFUSAL = "I do not know."
SLIP = "I misapplied the rule."

_FAMILY = re.compile(r"\bfamily\s+([A-Za-z0-9_-]+)")
_ENTRY_LINE = re.compile(r"^\[[^\]\n]+\] helpful=\d+ harmful=\d+ :: (.*)$", re.MULTILINE)
_SPACES = re.compile(r"\s+")


def _draw(seed: int, *parts: str) -> float:
    digest = hashlib.sha256("\x1f".join((str(seed), *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def normalised(text: str) -> str:
    """Lower case, single spaces, no trailing punctuation: what the simulated judge compares."""
    return _SPACES.sub(" ", text).strip().lower().rstrip(".!;:, ")


def action_of(content: str) -> str:
    """What an agent following an entry answers: its content after the first ``), `` up to a trailing period."""
    _, found, rest = content.partition("), ")
    return (rest if found else content).strip().rstrip(".").strip()


def simulate_agent(data: dict[str, Any], seed: int) -> str:
    """The agent's answer to the task's input with the rendered playbook."""
    task_input = str(data.get("input") or "")
    key = _FAMILY.search(task_input)
    if key is None:
        return REFUSAL
    word = re.compile(rf"\b{re.escape(key.group(1))}\b", re.IGNORECASE)
    entries = [content for content in _ENTRY_LINE.findall(str(data.get("playbook") or "")) if word.search(content)]
    if not entries:
        return REFUSAL
    followed = entries[int(_draw(seed, task_input, "follow", *entries) * len(entries))]
    if _draw(seed, task_input, "slip", str(data.get("playbook") or "")) < AGENT_SLIP_RATE:
        return SLIP
    return action_of(followed)


def exact_verdict(answer: str, expected: str) -> bool:
    """The exact scoring the judge's model starts from: equal, or one contains the other, once normalised."""
    a, e = normalised(answer), normalised(expected)
    return bool(a and e) and (a == e or a in e or e in a)


def simulate_judge(data: dict[str, Any], seed: int) -> dict[str, Any]:
    """The judge's verdict on an answer: exact comparison (or, with only a rubric, not a refusal), then flipped with
    probability ``JUDGE_ERROR_RATE``."""
    answer, expected, rubric = (str(data.get(k) or "") for k in ("answer", "expected", "rubric"))
    if expected:
        right = exact_verdict(answer, expected)
    else:
        right = bool(normalised(answer)) and not normalised(answer).startswith(normalised(REFUSAL))
    flipped = _draw(seed, str(data.get("input") or ""), answer, expected, rubric, "judge") < JUDGE_ERROR_RATE
    verdict = right != flipped
    reason = "the answer matches the expected answer" if right else "the answer does not match"
    return {"verdict": "correct" if verdict else "incorrect", "score": 1.0 if verdict else 0.0,
            "reason": reason + (" (judged otherwise)" if flipped else "")}


def simulate_call(task: str, data: dict[str, Any], seed: int) -> dict[str, Any]:
    """The answer to a ``judge`` call (a verdict), or an ``agent`` call (``{"answer": text}``, sent as plain text)."""
    return simulate_judge(data, seed) if task == "judge" else {"answer": simulate_agent(data, seed)}
