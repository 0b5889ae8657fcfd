"""How long an agent's task (a rollout) takes, modelled: what a sync fleet waits for besides the pipeline.

The paper measures *training time per epoch*, which includes the agents' rollouts: in a sync fleet every round
runs its tasks with version v, then waits for version v+1. We model one task as ``calls_per_task`` agent LLM calls
at the simulator's own latency model (``combee_core.llm.simulator.modelled_latency``), each reading
``prompt_tokens_per_call`` and writing ``completion_tokens_per_call`` tokens. The parameters and where they come
from are in docs/simulator.md ("Rollouts"); they were fixed before any benchmark that uses them.

A round of ``n`` tasks on ``agents`` parallel agents takes ``ceil(n / agents)`` task times (each agent runs its
share one after the other; ``agents=None`` means one agent per task, as in the paper's setting where the batch is
the set of parallel agents' traces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from combee_core.llm.simulator import SimulatorConfig, modelled_latency

if TYPE_CHECKING:
    from combee_core.settings import CombeeSettings

__all__ = ["RolloutModel", "modelled_task_time_s", "rollout_model", "round_rollout_s"]


@dataclass(frozen=True)
class RolloutModel:
    """One agent task = ``calls_per_task`` LLM calls of the given size, at the simulator's latency."""

    calls_per_task: int = 10
    prompt_tokens_per_call: int = 2000
    completion_tokens_per_call: int = 150

    def __post_init__(self) -> None:
        if self.calls_per_task < 0 or self.prompt_tokens_per_call < 0 or self.completion_tokens_per_call < 0:
            raise ValueError(f"rollout model parameters must be >= 0, got {self}")

    def task_time_s(self, simulator: SimulatorConfig | None = None) -> float:
        """Modelled seconds one agent spends on one task (unscaled: the simulator's time_scale is not applied)."""
        config = simulator or SimulatorConfig()
        per_call = modelled_latency(self.prompt_tokens_per_call, self.completion_tokens_per_call, config)
        return self.calls_per_task * per_call

    def round_s(self, tasks: int, agents: int | None = None, simulator: SimulatorConfig | None = None) -> float:
        """Modelled seconds the rollouts of one round of ``tasks`` take on ``agents`` parallel agents."""
        return round_rollout_s(tasks, agents, self.task_time_s(simulator))


def round_rollout_s(tasks: int, agents: int | None, task_time_s: float) -> float:
    """``ceil(tasks / agents) * task_time_s``; ``agents=None``: every task has its own agent (one wave)."""
    if tasks < 0:
        raise ValueError(f"tasks must be >= 0, got {tasks}")
    if agents is not None and agents < 1:
        raise ValueError(f"agents must be >= 1, got {agents}")
    if tasks == 0:
        return 0.0
    waves = 1 if agents is None else math.ceil(tasks / agents)
    return waves * task_time_s


def rollout_model(settings: CombeeSettings) -> RolloutModel:
    """The rollout model a run's settings (``CombeeSettings``) describe."""
    return RolloutModel(calls_per_task=settings.rollout_calls_per_task,
                        prompt_tokens_per_call=settings.rollout_prompt_tokens,
                        completion_tokens_per_call=settings.rollout_completion_tokens)


def modelled_task_time_s(settings: CombeeSettings) -> float:
    """One task's modelled time under ``settings``, scaled by the simulator's ``sim_time_scale`` (like its calls)."""
    return float(rollout_model(settings).task_time_s() * settings.sim_time_scale)
