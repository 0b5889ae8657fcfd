"""Scripted stand-ins for the reducer model (``docs/simulator.md``, "Scripted reducer stand-ins"): what the honest
benchmark runs in place of the reducer LLM call to check that no reducer answer makes curation worse than the judge
alone. Benchmark code, not a method: the oracle and the adversary read the registry.

- ``union``: every operation it is given, identical ADD texts once (support summed);
- ``merge-all``: every ADD it is given merged into the first one (support summed), other operations passed on;
- ``drop-all``: nothing (a model that answers with no operations);
- ``oracle``: one ADD per statement the registry says the ADDs make (the first wording, support summed), and of a
  family's rule and its opposite only the rule;
- ``adversarial``: of a family's rule and its opposite only the opposite, and every ADD of a section merged into one
  (a false merge of distinct rules), using only texts it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from combee_core.models import AddOp, Operation, Usage
from combee_core.playbook.embedding_models import embedder_from
from combee_core.reduce.processor import Reducer, ReducerConfig, ReduceRole
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.settings import CombeeSettings
from combee_core.sim.sim_registry import TextRegistry, normalise_text

STANDINS = ("union", "merge-all", "drop-all", "oracle", "adversarial")
JUDGE_ALONE = "judge alone"
"""The baseline the stand-ins are held to: the reducer processor with no reducer call at all. What the deterministic
merge leaves contested (lessons the judge calls contradictory, edits that disagree) is applied as it was given, and
the judge alone curates it (``ask_reducer`` off: no call is asked anything, so nothing waits on an answer)."""


def _grouped(adds: Sequence[AddOp], key: Callable[[AddOp], Any]) -> list[AddOp]:
    groups: dict[Any, AddOp] = {}
    for add in adds:
        k = key(add)
        held = groups.get(k)
        groups[k] = add if held is None else held.model_copy(update={"support": held.support + add.support})
    return list(groups.values())


def _polarity(registry: TextRegistry, add: AddOp) -> tuple[str | None, int]:
    statement = registry.lookup(add.content)
    if statement is None or statement.kind != "rule":
        return None, 0
    return statement.subject, statement.polarity


def scripted_operations(name: str, registry: TextRegistry, children: list[list[Operation]]) -> list[Operation]:
    """What stand-in ``name`` answers to a reducer call given ``children``."""
    ops = [op for child in children for op in child]
    adds = [op for op in ops if isinstance(op, AddOp)]
    others = [op for op in ops if not isinstance(op, AddOp)]
    if name == "drop-all":
        return []
    if name == "union":
        return [*_grouped(adds, lambda a: normalise_text(a.content)), *others]
    if name == "merge-all":
        return [*_grouped(adds, lambda a: 0), *others]
    keep = -1 if name == "adversarial" else 1
    families = {_polarity(registry, a) for a in adds}
    contested = {family for family, polarity in families if family and (family, -polarity) in families}
    chosen = [a for a in adds if (p := _polarity(registry, a))[0] not in contested or p[1] == keep]
    if name == "oracle":
        def meaning(add: AddOp) -> Any:
            statement = registry.lookup(add.content)
            return normalise_text(add.content) if statement is None else statement
        return [*_grouped(chosen, meaning), *others]
    if name == "adversarial":
        return [*_grouped(chosen, lambda a: a.section), *others]
    raise ValueError(f"unknown reducer stand-in {name!r}; one of {', '.join(STANDINS)}")


def standin_role(name: str, registry: TextRegistry) -> ReduceRole:
    """A reducer role answering as stand-in ``name`` (no tokens, no latency)."""
    if name not in STANDINS:
        raise ValueError(f"unknown reducer stand-in {name!r}; one of {', '.join(STANDINS)}")

    async def role(children: list[list[Operation]], context_text: str) -> ReduceOutcome:
        return ReduceOutcome(operations=scripted_operations(name, registry, children), usage=Usage(), latency_s=0.0)

    return role


async def no_call(children: list[list[Operation]], context_text: str) -> ReduceOutcome:
    """No reducer call: the children's operations as they were given (no tokens, no latency)."""
    return ReduceOutcome(operations=[op for child in children for op in child], usage=Usage(), latency_s=0.0)


def standin_reducer(registry: TextRegistry, settings: CombeeSettings, name: str) -> Callable[[ReduceRole], Reducer]:
    """The reducer stage's processor configured from ``settings`` as for a real reducer model (``ask_reducer``: it
    asks the call what the judge is unsure of), its call answered by stand-in ``name`` instead of the simulator;
    ``name`` = :data:`JUDGE_ALONE`: configured as for no reducer model, and no call."""
    if name == JUDGE_ALONE:
        config = replace(ReducerConfig.from_settings(settings), ask_reducer=False)
        return lambda _simulated: Reducer(config, no_call, embedder_from(settings))
    config = replace(ReducerConfig.from_settings(settings), ask_reducer=True)
    role = standin_role(name, registry)
    return lambda _simulated: Reducer(config, role, embedder_from(settings))
