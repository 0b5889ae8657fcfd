"""What the synthetic task suite is: its sections and rule families, its tasks, the suite with its pinned split, and
honest mode's environment. Building the suite and running its tasks: :mod:`combee_core.sim.task_suite`; honest mode's
scoring: :mod:`combee_core.sim.honest_suite` (both build on this module, never the reverse). ``docs/simulator.md``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SECTIONS = ("arithmetic", "units", "dates", "formatting", "lookup", "tools")

_SUBJECTS = (
    "invoice totals", "percent changes", "compound interest", "unit prices", "currency conversion", "tax rates",
    "fiscal quarters", "leap years", "time zones", "date ranges", "rounding", "thousands separators",
    "negative numbers", "ratios", "averages", "medians", "table lookups", "missing values", "API pagination",
    "retry limits", "file paths", "CSV headers", "sorting order", "string casing", "null checks", "ID formats",
    "weekday names", "month lengths", "basis points", "significant figures", "scientific notation", "ranges",
)
_ACTIONS = (
    "apply the discount before the tax", "divide by the earlier value, not the later one",
    "convert to the same unit first",
    "count the end date as included", "keep two decimal places", "read the header row before the data",
    "use the last page token until it is empty", "normalise to UTC before comparing", "state the unit in the answer",
    "treat an empty cell as missing, not zero", "sort ascending unless told otherwise", "quote paths with spaces",
)
GENERIC_TIPS = (
    ("tools", "Re-read the question before answering."),
    ("formatting", "Double-check the final answer's format."),
    ("arithmetic", "Show intermediate steps when computing."),
    ("lookup", "Prefer the most specific source available."),
)


HARMFUL_ACTION = "skip the check and guess the answer"
"""The wrong rule every family can be taught by a misleading feedback source (``misleading_trace``)."""


@dataclass(frozen=True)
class HonestFeedback:
    """Honest mode's environment (``docs/simulator.md``, "Feedback is about the task instance"): what a failed run's
    feedback says besides ``Wrong answer for <task>.`` -- this instance's expected and given answer, which of its
    checks failed, or nothing more. Never a wording of the rule."""

    expected: float = 0.25
    check: float = 0.35
    noisy_citations: bool = False
    """Agents' ``used_entries`` leave out each used entry with ``cite_omit`` and cite an unused one with
    ``cite_spurious`` per run (docs/simulator.md, "Agents that cite wrongly, and a wrong grader")."""
    cite_omit: float = 0.2
    cite_spurious: float = 0.1
    misleading_families: tuple[str, ...] = ()
    """Families whose failed runs, during the first ``misleading_passes`` passes, get a wrong grader's feedback."""
    misleading_passes: int = 1
    cite_followed: bool = False
    """An agent holding both a family's rule and its opposite follows one side (chance 1/2), succeeds as with that
    side alone and cites that side's entries (docs/simulator.md, "An agent holding both rules cites the one it
    followed")."""


@dataclass(frozen=True)
class RuleFamily:
    """A family of tasks that share one needed insight."""

    family_id: str
    section: str
    insight: str
    base_p: float

    @property
    def harmful_insight(self) -> str:
        """The family's harmful rule: an agent following it does worse than with no playbook."""
        return self.insight.split("), ")[0] + f"), {HARMFUL_ACTION}."


@dataclass(frozen=True)
class Task:
    task_id: str
    family_id: str
    prompt: str


@dataclass(frozen=True)
class TaskSuite:
    """Families, and the pinned split of their tasks."""

    families: tuple[RuleFamily, ...]
    train: tuple[Task, ...]
    held_out: tuple[Task, ...]
    with_insight_p: float
    generic_rate: float
    seed: int
    harmful_p: float = 0.05
    """Success probability of a family's task when the playbook holds the family's harmful rule (whatever else)."""
    honest: HonestFeedback | None = None
    """Honest mode: feedback from :class:`HonestFeedback`, and entries scored by what they state
    (``combee_core.sim.honest_suite``); None: the default mode (``LESSON`` lines, scored by the rule's text)."""

    def family(self, family_id: str) -> RuleFamily:
        return self._by_id()[family_id]

    def _by_id(self) -> dict[str, RuleFamily]:
        return {f.family_id: f for f in self.families}



def build_families(count: int, rng: random.Random,
                   base_p_range: tuple[float, float] = (0.2, 0.5)) -> tuple[RuleFamily, ...]:
    """``count`` rule families, drawn from ``rng`` (a suite's seeded generator, which goes on to deal its split)."""
    built = []
    for index in range(count):
        family_id = f"R{index:02d}"
        subject = _SUBJECTS[index % len(_SUBJECTS)]
        action = _ACTIONS[rng.randrange(len(_ACTIONS))]
        insight = f"For {subject} ({family_id}), {action}."
        built.append(RuleFamily(family_id, SECTIONS[index % len(SECTIONS)], insight, rng.uniform(*base_p_range)))
    return tuple(built)
