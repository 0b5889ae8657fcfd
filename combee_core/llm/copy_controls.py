"""Reflectors that copy strings instead of diagnosing: the controls a learning benchmark must fail
(``docs/simulator.md``, "The copying controls").

None reads the registry or diagnoses anything. Each files its insights under ``general``, at most
``MAX_INSIGHTS_PER_REFLECTION`` per trace, repeats removed:

- ``verbatim``: every feedback line as written;
- ``copy-prefixes``: the feedback lines except those starting with the five prefixes of issue 38;
- ``copy-masked``: the lines left without the outcome line and the task id, every value masked (numbers, dates,
  times, quoted text, paths), i.e. the general shape of the grader's sentence;
- ``nouns``: the content words of the feedback and the task input, echoed as one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from combee_core import limits

CONTROL_SECTION = "general"

FIVE_PREFIXES = ("Wrong answer for", "Correct", "Check how you handled", "The checker flagged", "Look again at")
"""The line prefixes the copier of issue 38 dropped: the outcome lines and the three former hint openings."""

OUTCOME_PREFIXES = ("Wrong answer for", "Correct")
_QUOTED = re.compile(r'"[^"]*"')
_VALUE = re.compile(r"\S*(?:\d|/)\S*")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:%)])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
STOP_WORDS = frozenset(
    "a an the of to for in on at by from with and or but not no is are was were be been it its this that these those "
    "as into than then there their they them we you your our he she his her which who what when where how why if "
    "put passed come came before after over under about was".split()
)
"""Words the ``nouns`` control leaves out (articles, prepositions, pronouns, auxiliaries): what is left stands for
the nouns and other content words of the text (no part-of-speech tagger: the control needs none to fail)."""


def _lines(trace: dict[str, Any]) -> list[str]:
    return [" ".join(line.split()) for line in str(trace.get("feedback") or "").splitlines()]


def _insights(texts: Iterable[str]) -> list[dict[str, str]]:
    kept = list(dict.fromkeys(text[: limits.MAX_INSIGHT_CHARS] for text in texts if text))
    return [{"section": CONTROL_SECTION, "content": text} for text in kept[: limits.MAX_INSIGHTS_PER_REFLECTION]]


def verbatim_insights(trace: dict[str, Any]) -> list[dict[str, str]]:
    """Every non-empty feedback line, as written."""
    return _insights(_lines(trace))


def prefix_filtered_insights(trace: dict[str, Any]) -> list[dict[str, str]]:
    """Every feedback line that does not start with one of :data:`FIVE_PREFIXES`."""
    return _insights(line for line in _lines(trace) if not line.startswith(FIVE_PREFIXES))


def mask_values(line: str) -> str:
    """``line`` with quoted text and every token holding a digit or a slash removed (numbers, dates, times, ids,
    paths), white space collapsed; empty when nothing but punctuation is left."""
    masked = _VALUE.sub(" ", _QUOTED.sub(" ", line))
    masked = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(masked.split()))
    return masked if _WORD.search(masked) else ""


def masked_insights(trace: dict[str, Any]) -> list[dict[str, str]]:
    """The feedback lines that are not the outcome line and do not carry the task id, with their values masked."""
    task_id = str(trace.get("task_id") or "")
    return _insights(mask_values(line) for line in _lines(trace)
                     if not line.startswith(OUTCOME_PREFIXES) and not (task_id and task_id in line))


def noun_insights(trace: dict[str, Any]) -> list[dict[str, str]]:
    """One line echoing the content words of the feedback and the task input, in order of first use."""
    text = " ".join([str(trace.get("input") or ""), *_lines(trace)])
    words = [w.lower() for w in _WORD.findall(_VALUE.sub(" ", text))]
    kept = list(dict.fromkeys(w for w in words if w not in STOP_WORDS and len(w) > 1))
    return _insights([f"Mind: {', '.join(kept)}."] if kept else [])


CONTROLS: dict[str, Callable[[dict[str, Any]], list[dict[str, str]]]] = {
    "verbatim": verbatim_insights,
    "copy-prefixes": prefix_filtered_insights,
    "copy-masked": masked_insights,
    "nouns": noun_insights,
}
"""``SimulatorConfig.reflection`` mode -> its copying reflector."""
