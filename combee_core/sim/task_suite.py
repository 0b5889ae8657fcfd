"""A synthetic task suite for simulated agents, with a pinned train / held-out split.

R rule families are spread over playbook sections. A simulated agent solves a task with its family's base
probability, unless the playbook it runs with holds the family's insight (then with ``with_insight_p``). A failed
run's environment feedback states the lesson (``LESSON[section]: ...``) from which a reflection can recover the
insight; any run may also carry a generic lesson (``GENERIC[section]: ...``) that many families share and that adds
no accuracy. Each family also has a *harmful* rule (``harmful_insight``): a playbook holding it makes the family's
tasks fail more often than with no playbook at all (``harmful_p``); only traces made with :func:`misleading_trace`
(a feedback source that states the wrong rule) teach it. See ``docs/simulator.md``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Literal

from combee_core.llm.paraphrase import meaning_key
from combee_core.llm.simulator import format_lesson
from combee_core.models import PlaybookEntry, Trace
from combee_core.sim.suite import GENERIC_TIPS, HonestFeedback, RuleFamily, Task, TaskSuite, build_families


def build_suite(
    families: int = 24,
    train_per_family: int = 20,
    held_out_per_family: int = 5,
    *,
    seed: int = 7,
    with_insight_p: float = 0.95,
    base_p_range: tuple[float, float] = (0.2, 0.5),
    generic_rate: float = 0.3,
    feedback: Literal["lessons", "honest"] = "lessons",
    honest: HonestFeedback | None = None,
) -> TaskSuite:
    """Build the suite deterministically from ``seed``; the split is pinned by the seed, never by the run.
    ``feedback="honest"``: honest mode's feedback and scoring (the families, rules and split are the same), with
    ``honest`` (default ``HonestFeedback()``) as its environment."""
    rng = random.Random(seed)
    built = build_families(families, rng, base_p_range)
    train: list[Task] = []
    held_out: list[Task] = []
    for family in built:
        for n in range(train_per_family + held_out_per_family):
            task = Task(f"{family.family_id}-{n:03d}", family.family_id,
                        f"Task {n} of family {family.family_id}: a question about {family.insight.split(' (')[0][4:]}.")
            (train if n < train_per_family else held_out).append(task)
    rng.shuffle(train)
    environment = (honest or HonestFeedback()) if feedback == "honest" else None
    return TaskSuite(tuple(built), tuple(train), tuple(held_out), with_insight_p, generic_rate, seed,
                     honest=environment)


def holds_insight(family: RuleFamily, entries: Iterable[PlaybookEntry], *, harmful: bool = False) -> str | None:
    """Entry id of an entry carrying the family's insight (its rule id and wording, or one of the simulator's
    paraphrases of it: an agent understands a reworded rule), or None; with ``harmful``, of an entry carrying the
    family's harmful rule."""
    rule = family.harmful_insight if harmful else family.insight
    wanted = " ".join(rule.lower().split())
    wanted_key = meaning_key(rule)
    for entry in entries:
        content = " ".join(entry.content.lower().split())
        if family.family_id.lower() in content and (
            content == wanted or wanted in content or content in wanted or meaning_key(entry.content) == wanted_key
        ):
            return entry.entry_id
    return None


def success_probability(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry]) -> float:
    """``harmful_p`` when the playbook holds the family's harmful rule, else ``with_insight_p`` when it holds the
    family's insight, else the family's base probability. Honest mode: by what the entries state
    (:func:`combee_core.sim.honest_suite.success_probability`)."""
    if suite.honest is not None:
        # only honest mode loads its registry: the built-in evaluator (a processor) imports this module, and
        # curation never loads the registry (tests/unit/test_honest_mode.py); honest_suite never imports this module
        from combee_core.sim import honest_suite

        return honest_suite.success_probability(suite, task, entries)
    family = suite.family(task.family_id)
    if holds_insight(family, entries, harmful=True):
        return suite.harmful_p
    return suite.with_insight_p if holds_insight(family, entries) else family.base_p


def task_by_id(suite: TaskSuite, task_id: str) -> Task | None:
    """The train or held-out task with this id, or None."""
    for task in (*suite.train, *suite.held_out):
        if task.task_id == task_id:
            return task
    return None


def expected_accuracy(suite: TaskSuite, tasks: Sequence[Task], entries: Sequence[PlaybookEntry]) -> float:
    """Mean success probability over ``tasks`` with this playbook (noise-free held-out accuracy)."""
    if not tasks:
        return 0.0
    return sum(success_probability(suite, task, entries) for task in tasks) / len(tasks)


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def run_task(
    suite: TaskSuite,
    task: Task,
    entries: Sequence[PlaybookEntry],
    *,
    playbook_id: str,
    playbook_version: int,
    agent_id: str,
    attempt: int,
    run_seed: int,
    created_at: datetime | None = None,
) -> Trace:
    """Simulate one agent run and return its trace (deterministic for its arguments)."""
    family = suite.family(task.family_id)
    p = success_probability(suite, task, entries)
    followed: Sequence[PlaybookEntry] = entries
    if suite.honest is not None and suite.honest.cite_followed:
        from combee_core.sim import honest_suite  # only honest mode loads its registry (success_probability)

        p, followed = honest_suite.followed_side(suite, task, entries, run_seed=run_seed, attempt=attempt,
                                                 version=playbook_version)
    success = _unit(run_seed, task.task_id, attempt, playbook_version, "success") < p
    feedback_lines = ["Correct." if success else f"Wrong answer for {task.task_id}."]
    extra: dict[str, str] = {}
    if suite.honest is not None:
        from combee_core.sim import honest_suite  # only honest mode loads its registry (success_probability)

        used: str | None = honest_suite.cited_entries(suite, task, followed, run_seed=run_seed, attempt=attempt,
                                                      version=playbook_version, playbook=entries)
        feedback_lines += honest_suite.feedback_lines(suite, task, success, run_seed=run_seed, attempt=attempt)
        if not success and honest_suite.misled(suite, task, attempt):
            extra["grader"] = "misleading"
    else:
        used = holds_insight(family, entries, harmful=True) or holds_insight(family, entries)
        if not success:
            feedback_lines.append(format_lesson(family.section, family.insight))
    if suite.honest is None and _unit(run_seed, task.task_id, attempt, "generic") < suite.generic_rate:
        section, text = GENERIC_TIPS[int(_unit(run_seed, task.task_id, attempt, "which") * len(GENERIC_TIPS))]
        feedback_lines.append(format_lesson(section, text, generic=True))
    trace_id = f"{playbook_id}-{agent_id}-{task.task_id}-{attempt}"
    return Trace(
        trace_id=trace_id,
        playbook_id=playbook_id,
        playbook_version=playbook_version,
        agent_id=agent_id,
        task_id=task.task_id,
        input=task.prompt,
        output="(simulated answer)" if success else "(simulated wrong answer)",
        feedback="\n".join(feedback_lines),
        score=1.0 if success else 0.0,
        success=success,
        metadata={"family": family.family_id, **({"used_entries": used} if used else {}), **extra},
        created_at=created_at or datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


def train_traces(
    suite: TaskSuite, count: int, *, playbook_ids: Sequence[str] = ("pb",), run_seed: int = 0, agents: int = 40
) -> list[Trace]:
    """``count`` traces of agents running the train split with the empty playbook (version 0): tasks cycled
    (attempt = pass number), agents and playbooks dealt round-robin. Deterministic for its arguments."""
    train = suite.train
    return [
        run_task(suite, train[i % len(train)], [], playbook_id=playbook_ids[i % len(playbook_ids)],
                 playbook_version=0, agent_id=f"agent{i % agents:02d}", attempt=i // len(train), run_seed=run_seed)
        for i in range(count)
    ]


def misleading_trace(
    suite: TaskSuite, task: Task, *, playbook_id: str, playbook_version: int, agent_id: str, attempt: int,
    created_at: datetime | None = None,
) -> Trace:
    """A failed run whose feedback states the family's *harmful* rule (``LESSON[section]: <harmful rule>``): what a
    wrong grader or a misleading user would write. The simulated reflector learns it like any lesson."""
    family = suite.family(task.family_id)
    return Trace(
        trace_id=f"{playbook_id}-{agent_id}-{task.task_id}-{attempt}-misled",
        playbook_id=playbook_id,
        playbook_version=playbook_version,
        agent_id=agent_id,
        task_id=task.task_id,
        input=task.prompt,
        output="(simulated wrong answer)",
        feedback="\n".join([f"Wrong answer for {task.task_id}.",
                            format_lesson(family.section, family.harmful_insight)]),
        score=0.0,
        success=False,
        metadata={"family": family.family_id},
        created_at=created_at or datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
