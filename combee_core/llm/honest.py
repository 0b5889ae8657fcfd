"""The honest simulated reflector (``docs/simulator.md``, "Honest mode"); the copying controls are in
``combee_core.llm.copy_controls``.

For a failed run it states a lesson about the task's rule with a probability that depends on what the feedback gave
it (this instance's expected and given answer, the check that failed, or the outcome only), sometimes the opposite
rule, in one of 60 wordings of its own (the feedback never holds one), filed under the family's section or (0.2)
another; any run may add a generic tip. Texts come from the registry, so the simulator knows what each states.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from combee_core.sim.instances import instance_kind
from combee_core.sim.sim_registry import TextRegistry, registry_for
from combee_core.sim.suite import SECTIONS


class SuiteSeeds(Protocol):
    """What honest mode reads of the simulator's settings (``combee_core.llm.simulator.SimulatorConfig``): the run's
    seed, and the task suite its traces come from."""

    @property
    def seed(self) -> int: ...

    @property
    def suite_seed(self) -> int: ...

    @property
    def suite_families(self) -> int: ...


@dataclass(frozen=True)
class HonestReflector:
    """The honest reflector's rates, fixed in ``docs/simulator.md`` before any run (not settings: not to be tuned)."""

    states_lesson: tuple[float, float, float] = (0.90, 0.70, 0.40)
    """P(states a lesson) when the feedback gives the instance's expected and given answer, the failed check, the
    outcome only."""
    opposite: tuple[float, float, float] = (0.05, 0.10, 0.25)
    """P(the stated lesson is the opposite rule), same order."""
    other_section: float = 0.2
    generic_rate: float = 0.3


HONEST = HonestReflector()


def _unit(seed: int, trace_id: str, purpose: str) -> float:
    digest = hashlib.sha256(f"{seed}\x1f{trace_id}\x1f{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _pick(seq: tuple[Any, ...] | list[Any], u: float) -> Any:
    return seq[min(int(u * len(seq)), len(seq) - 1)]


def feedback_kind(registry: TextRegistry, family_id: str, feedback: str) -> int:
    """0: a line gives this instance's expected and given answer, 1: a line names the check that failed, 2: the
    outcome only (the simulator recognises its own instance templates, ``combee_core.sim.instances``)."""
    action = registry.actions.get(family_id)
    if action is None:
        return 2
    kind = 2
    for line in (feedback or "").splitlines():
        found = instance_kind(action, line)
        if found == "expected":
            return 0
        if found == "check":
            kind = 1
    return kind


def honest_insights(trace: dict[str, Any], config: SuiteSeeds, model: HonestReflector = HONEST) -> list[
    dict[str, str]
]:
    """The insights the honest reflector states for one trace (see the module docstring)."""
    registry = registry_for(config.suite_seed, config.suite_families)
    trace_id = str(trace.get("trace_id", ""))
    family_id = str((trace.get("metadata") or {}).get("family") or str(trace.get("task_id") or "").split("-")[0])

    def draw(purpose: str) -> float:
        return _unit(config.seed, trace_id, purpose)

    insights: list[dict[str, str]] = []
    if trace.get("success") is False and (family_id, 1) in registry.wordings:
        kind = feedback_kind(registry, family_id, str(trace.get("feedback") or ""))
        if draw("states") < model.states_lesson[kind]:
            implied = -1 if (trace.get("metadata") or {}).get("grader") == "misleading" else 1
            polarity = -implied if draw("opposite") < model.opposite[kind] else implied
            text = _pick(registry.wordings[(family_id, polarity)], draw("wording"))
            section = registry.sections[family_id]
            if draw("section") < model.other_section:
                section = _pick([s for s in SECTIONS if s != section], draw("which-section"))
            insights.append({"section": section, "content": text})
    if draw("generic") < model.generic_rate:
        section, texts = _pick(registry.generics, draw("which-generic"))
        insights.append({"section": section, "content": _pick(texts, draw("generic-wording"))})
    return insights
