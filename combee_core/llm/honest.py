"""The honest simulated reflector and the copying control (``docs/simulator.md``, "Honest mode").

Honest: for a failed run it states a lesson about the task's rule with a probability that depends on what the
feedback gave it (the rule, a hint, or the outcome only), sometimes the opposite rule, in one of 60 wordings, filed
under the family's section or (0.2) another; any run may add a generic tip. Verbatim (the control): every feedback
line becomes an insight as written. Texts come from the registry, so the simulator knows what each states.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from combee_core import limits
from combee_core.sim.sim_registry import TextRegistry, registry_for
from combee_core.sim.tasks import SECTIONS

if TYPE_CHECKING:
    from combee_core.llm.simulator import SimulatorConfig


@dataclass(frozen=True)
class HonestReflector:
    """The honest reflector's rates, fixed in ``docs/simulator.md`` before any run (not settings: not to be tuned)."""

    states_lesson: tuple[float, float, float] = (0.95, 0.70, 0.40)
    """P(states a lesson) when the feedback states the rule, gives a hint, gives the outcome only."""
    opposite: tuple[float, float, float] = (0.02, 0.10, 0.25)
    """P(the stated lesson is the opposite rule), same order."""
    other_section: float = 0.2
    generic_rate: float = 0.3


HONEST = HonestReflector()
VERBATIM_SECTION = "general"


def _unit(seed: int, trace_id: str, purpose: str) -> float:
    digest = hashlib.sha256(f"{seed}\x1f{trace_id}\x1f{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _pick(seq: tuple[Any, ...] | list[Any], u: float) -> Any:
    return seq[min(int(u * len(seq)), len(seq) - 1)]


def feedback_kind(registry: TextRegistry, family_id: str, feedback: str) -> int:
    """0: a line states the family's rule, 1: a line is a hint about it, 2: the outcome only."""
    kind = 2
    for line in (feedback or "").splitlines():
        statement = registry.lookup(line)
        if statement is not None and statement.subject == family_id:
            if statement.kind == "rule" and statement.polarity > 0:
                return 0
            if statement.kind == "hint":
                kind = 1
    return kind


def honest_insights(trace: dict[str, Any], config: SimulatorConfig, model: HonestReflector = HONEST) -> list[
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
            polarity = -1 if draw("opposite") < model.opposite[kind] else 1
            text = _pick(registry.wordings[(family_id, polarity)], draw("wording"))
            section = registry.sections[family_id]
            if draw("section") < model.other_section:
                section = _pick([s for s in SECTIONS if s != section], draw("which-section"))
            insights.append({"section": section, "content": text})
    if draw("generic") < model.generic_rate:
        section, texts = _pick(registry.generics, draw("which-generic"))
        insights.append({"section": section, "content": _pick(texts, draw("generic-wording"))})
    return insights


def verbatim_insights(trace: dict[str, Any]) -> list[dict[str, str]]:
    """The copying control: every non-empty feedback line, as written, under ``general``."""
    lines = [" ".join(line.split()) for line in str(trace.get("feedback") or "").splitlines()]
    kept = list(dict.fromkeys(line[: limits.MAX_INSIGHT_CHARS] for line in lines if line))
    return [{"section": VERBATIM_SECTION, "content": line} for line in kept[: limits.MAX_INSIGHTS_PER_REFLECTION]]
