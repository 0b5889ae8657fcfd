"""What a worker tells its operator about the models it runs: which model each role uses, and, when a role runs on
the offline simulator, what that means for traces from outside producers (it learns only from ``LESSON[...]`` lines).

Pure: the worker prints :func:`describe_models` and :func:`simulator_warning` once at start, and the reducer hands
each version it publishes to an :class:`EmptyVersionNotice`, which says (once per playbook, then at most once per
``interval_s``) that versions come out without operations because the reflector is the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from combee_core.llm.simulator import is_sim_model
from combee_core.settings import CombeeSettings

ROLES = ("reflector", "aggregator", "reducer")
MODELS_DOC = "docs/models.md"
LESSON_FORMAT = "`LESSON[section]: text`"


def role_models(settings: CombeeSettings) -> dict[str, str]:
    """Role -> the model it calls."""
    return {role: getattr(settings, f"{role}_model") for role in ROLES}


def simulated_roles(settings: CombeeSettings) -> list[str]:
    """The roles that run on the offline simulator (``combee-sim/...``)."""
    return [role for role, model in role_models(settings).items() if is_sim_model(model)]


def describe_models(settings: CombeeSettings, *, evaluator: bool = False) -> str:
    """One line: each role's model (the simulator marked), and the built-in evaluator's when it runs."""
    parts = [f"{role} {model}{' (offline simulator)' if is_sim_model(model) else ''}"
             for role, model in role_models(settings).items()]
    if evaluator:
        parts.append(f"evaluator {settings.evaluator_model} (built-in: the synthetic task suite)")
    return "models: " + ", ".join(parts)


def simulator_warning(settings: CombeeSettings) -> str | None:
    """The warning for a run fed by outside producers when a role is simulated; None when none is."""
    roles = simulated_roles(settings)
    if not roles:
        return None
    which = ", ".join(roles)
    learns = (f"it learns only from {LESSON_FORMAT} lines in a trace's feedback, so traces without them make "
              "versions with no operations" if "reflector" in roles else
              "its answers are simulated, not a model's judgement")
    return (f"WARNING: {which} run{'s' if len(roles) == 1 else ''} on the offline simulator (combee-sim), a model "
            f"of an LLM for the demo and benchmarks: {learns}. To learn from real traces, point the roles at a model "
            f"(--model NAME, or COMBEE_REFLECTOR_MODEL / COMBEE_AGGREGATOR_MODEL / COMBEE_REDUCER_MODEL): "
            f"{MODELS_DOC}.")


@dataclass
class EmptyVersionNotice:
    """Says when versions have no operations while the reflector is the simulator: the first time per playbook,
    then at most once per ``interval_s`` (counting the versions in between), so a steady stream of such versions
    is one line every few minutes, not one per version."""

    reflector_model: str
    interval_s: float = 600.0
    _last: dict[str, float] = field(default_factory=dict)
    _since: dict[str, int] = field(default_factory=dict)

    def observe(self, playbook_id: str, version: int, operations: int, traces: int, now: float) -> str | None:
        """The warning to log for this version, or None."""
        if operations or not is_sim_model(self.reflector_model):
            return None
        self._since[playbook_id] = self._since.get(playbook_id, 0) + 1
        last = self._last.get(playbook_id)
        if last is not None and now - last < self.interval_s:
            return None
        count, self._since[playbook_id] = self._since[playbook_id], 0
        self._last[playbook_id] = now
        also = f" ({count} such versions since the last notice)" if last is not None else ""
        return (f"{playbook_id} v{version}: no operations from {traces} traces{also}. The reflector runs on the "
                f"offline simulator ({self.reflector_model}), which learns only from {LESSON_FORMAT} lines in "
                f"feedback; to learn from these traces, point it at a model ({MODELS_DOC}). Said once per playbook "
                f"per {self.interval_s:g} s.")
