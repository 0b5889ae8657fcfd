"""Honest mode's environment and scoring (``docs/simulator.md``, "Honest mode").

Feedback of a failed run: ``Wrong answer for <task>.``, then this instance's expected and given answer, the check of
it that failed, or nothing more (``combee_core.sim.instances``): never a text the registry credits. Scoring: an entry
helps a task when the registry says it states the task's rule (any wording, tag or no tag, any section); an entry
stating the opposite rule hurts. Never the similarity curation uses.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from combee_core.models import PlaybookEntry
from combee_core.sim.instances import InstanceKind, instance_line
from combee_core.sim.sim_registry import TextRegistry, registry_for
from combee_core.sim.suite import Task, TaskSuite

BOTH_P = 0.5
"""Success probability with both a right and an opposite statement: the agent follows either with equal chance."""


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def suite_registry(suite: TaskSuite) -> TextRegistry:
    """The registry of the suite's families."""
    return registry_for(suite.seed, len(suite.families))


@dataclass(frozen=True)
class FamilyHold:
    """The entries of a playbook that state a family's rule (right) or its opposite (wrong)."""

    right: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()


def holdings(suite: TaskSuite, entries: Iterable[PlaybookEntry]) -> dict[str, FamilyHold]:
    """Family id -> the entries stating its rule or its opposite, by the registry."""
    registry = suite_registry(suite)
    right: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for entry in entries:
        statement = registry.lookup(entry.content)
        if statement is None or statement.kind != "rule":
            continue
        (right if statement.polarity > 0 else wrong).setdefault(statement.subject, []).append(entry.entry_id)
    families = set(right) | set(wrong)
    return {f: FamilyHold(tuple(right.get(f, ())), tuple(wrong.get(f, ()))) for f in families}


def probability(suite: TaskSuite, family_id: str, hold: FamilyHold | None) -> float:
    """0.95 with a right statement only, ``harmful_p`` with a wrong one only, 0.5 with both, else the base."""
    if hold is None or not (hold.right or hold.wrong):
        return suite.family(family_id).base_p
    if hold.right and hold.wrong:
        return BOTH_P
    return suite.with_insight_p if hold.right else suite.harmful_p


def success_probability(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry]) -> float:
    """A task's success probability with this playbook, by what its entries state."""
    return probability(suite, task.family_id, holdings(suite, entries).get(task.family_id))


def expected_accuracy(suite: TaskSuite, tasks: Sequence[Task], entries: Sequence[PlaybookEntry]) -> float:
    """Mean success probability over ``tasks`` (computes the holdings once)."""
    if not tasks:
        return 0.0
    held = holdings(suite, entries)
    return sum(probability(suite, t.family_id, held.get(t.family_id)) for t in tasks) / len(tasks)


def used_entries(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry]) -> str:
    """Comma-separated ids of the entries stating the task's rule or its opposite (what the agent used)."""
    hold = holdings(suite, entries).get(task.family_id)
    return ",".join([*hold.right, *hold.wrong]) if hold else ""


def followed_side(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry], *, run_seed: int, attempt: int,
                  version: int) -> tuple[float, Sequence[PlaybookEntry]]:
    """With ``cite_followed``: an agent whose playbook holds both the task's rule and its opposite follows one side
    (chance 1/2); its success probability is that side's alone and the entries it used are that side's (the others
    of the playbook stay unused). Otherwise :func:`success_probability` and ``entries`` unchanged."""
    hold = holdings(suite, entries).get(task.family_id)
    if hold is None or not (hold.right and hold.wrong):
        return success_probability(suite, task, entries), entries
    right = _unit(run_seed, task.task_id, attempt, version, "follow") < 0.5
    dropped = set(hold.wrong if right else hold.right)
    return (suite.with_insight_p if right else suite.harmful_p), [e for e in entries if e.entry_id not in dropped]


def cited_entries(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry], *, run_seed: int, attempt: int,
                  version: int, playbook: Sequence[PlaybookEntry] | None = None) -> str:
    """What the agent reports it used: :func:`used_entries` of ``entries``, or with noisy citations each of them left
    out with ``cite_omit`` and, with ``cite_spurious``, one other entry of ``playbook`` (default ``entries``) cited
    (docs/simulator.md)."""
    used = used_entries(suite, task, entries)
    rates = suite.honest
    if rates is None or not rates.noisy_citations:
        return used
    ids = [e for e in used.split(",") if e and _unit(run_seed, task.task_id, attempt, version, e, "omit")
           >= rates.cite_omit]
    others = [e.entry_id for e in (entries if playbook is None else playbook) if e.entry_id not in used.split(",")]
    if others and _unit(run_seed, task.task_id, attempt, version, "spurious") < rates.cite_spurious:
        ids.append(others[int(_unit(run_seed, task.task_id, attempt, version, "which") * len(others))])
    return ",".join(ids)


def misled(suite: TaskSuite, task: Task, attempt: int) -> bool:
    """True when this run's grader is a wrong one (a listed family, within the misleading passes)."""
    rates = suite.honest
    return rates is not None and task.family_id in rates.misleading_families and attempt < rates.misleading_passes


def feedback_lines(suite: TaskSuite, task: Task, success: bool, *, run_seed: int, attempt: int) -> list[str]:
    """What the environment adds after ``Wrong answer for <task>.``: one line about this instance (its expected and
    given answer, or the check that failed, with values drawn for the instance) or nothing; nothing for a
    successful run. The line is never a registry text (``docs/simulator.md``)."""
    rates = suite.honest
    if success or rates is None:
        return []
    u = _unit(run_seed, task.task_id, attempt, "honest-feedback")
    kind: InstanceKind
    wrong = misled(suite, task, attempt)
    if wrong or u < rates.expected:
        kind = "expected"
    elif u < rates.expected + rates.check:
        kind = "check"
    else:
        return []
    seed = int.from_bytes(hashlib.sha256(f"{run_seed}|{task.task_id}|{attempt}|instance".encode()).digest()[:8], "big")
    return [instance_line(suite_registry(suite).actions[task.family_id], kind, random.Random(seed), swapped=wrong)]


@dataclass(frozen=True)
class LessonCount:
    """What a playbook holds, by the registry."""

    entries: int
    lessons: int
    """Distinct lessons held right: families with a right statement, plus generic tips."""
    families_right: int
    families_wrong: int
    """Families with an opposite (or harmful) statement held."""
    unknown: int
    """Entries the registry does not know (feedback outcome lines, texts curation wrote) or hints."""
    families_both: int = 0
    """Families with both a right and an opposite statement held."""

    @property
    def entries_per_lesson(self) -> float:
        return self.entries / self.lessons if self.lessons else float(self.entries or 1)


def count_lessons(suite: TaskSuite, entries: Sequence[PlaybookEntry]) -> LessonCount:
    """Entries, distinct lessons held right, families held right / wrong, entries stating no lesson."""
    registry = suite_registry(suite)
    right: set[str] = set()
    generic: set[str] = set()
    wrong: set[str] = set()
    unknown = 0
    for entry in entries:
        statement = registry.lookup(entry.content)
        if statement is None or statement.kind == "hint":
            unknown += 1
        elif statement.kind == "generic":
            generic.add(statement.subject)
        else:
            (right if statement.polarity > 0 else wrong).add(statement.subject)
    return LessonCount(len(entries), len(right) + len(generic), len(right), len(wrong), unknown, len(right & wrong))
