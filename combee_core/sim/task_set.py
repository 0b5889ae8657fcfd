"""The synthetic suite's held-out split as a held-out task set (``SUITE_SET``): what the built-in evaluator and the
demo register on ``task-sets``, so the promoter scores the suite as it scores any team's own tasks."""

from __future__ import annotations

from combee_core.models import HeldOutTask
from combee_core.sim.suite import TaskSuite

SUITE_SET = "suite"
"""The name of the suite's task set (the default pin, ``COMBEE_HELD_OUT_SETS=*=suite``)."""


def suite_tasks(suite: TaskSuite) -> list[HeldOutTask]:
    """The suite's held-out tasks, in order, each with its rule family as metadata (no expected answer: the built-in
    evaluator scores a task by the suite's success probability)."""
    return [HeldOutTask(task_id=task.task_id, input=task.prompt,
                        metadata={"family": task.family_id, "suite_seed": str(suite.seed),
                                  "suite_families": str(len(suite.families))})
            for task in suite.held_out]
