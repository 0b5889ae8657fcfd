"""Does the playbook stay lean when the roles see it?  Entries per distinct lesson, playbook tokens, completion
tokens and modelled LLM time per version, and held-out accuracy, at batch 3, 40 and 100, with and without context.

    python -m bench.learning                 # ~1 min; writes bench/results/learning.json
    python -m bench.learning --traces 960 --paraphrases 4 --budget 8000

A synchronous fleet: each round, ``batch`` agents run the next train tasks of the synthetic suite with the current
version (so traces name the entries they used), and the round's traces go through one round of the method,
``combee_core.method`` (reflect, augmented shuffle, aggregate per subgroup, reduce through the scan, control): the
processors the stages run, with the production defaults (fan-in 6, p = 2, k = floor(sqrt(n)) or the fewest
subgroups that fit a call, the reducer's deterministic merge, caps and demotion) but for what this benchmark varies
(context, the budget, the change cap; curation is lexical, ``embedding_model=none``). Context: the version the
batch applies to, rendered within the context budget, for the aggregator and reducer; the used entries' content
for the reflector. What it leaves out is Kafka (``tests/unit/test_method.py`` checks the round against the
processors chained as the stages chain them) and litellm: calls go to the offline simulator through ``LLMRoles``'
responder hook, with the simulator's token and latency model, in virtual time. Every quality, token and time figure
is simulated (``docs/simulator.md``), with reflections worded in ``--paraphrases`` ways. Before the third session
this benchmark wrote the round by hand with fan-in 32 (docs/benchmarks.md, "Benchmarks through method.py").

"lexical" is the playbook's own paraphrase consolidation (``is_paraphrase``; near-duplicates are always merged):
off shows what context does alone, and what the playbook did before it (context off, lexical off).

"Entries per distinct lesson" (bloat) = entries in the final playbook / distinct lessons they hold, where an entry's
lesson is the suite's rule or generic tip with the same simulator meaning key (a second entry for one lesson is
bloat). It is 1.0 when every lesson is held once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.llm.config import LLMConfig
from combee_core.llm.paraphrase import meaning_key
from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles
from combee_core.llm.simulator import INPUT_COST_PER_TOKEN, OUTPUT_COST_PER_TOKEN, SimulatorConfig, simulate
from combee_core.method import Method
from combee_core.models import Operation, PartialUpdate, PlaybookVersion, Reflection, Trace, Usage
from combee_core.playbook import Playbook, playbook_tokens
from combee_core.reduce.processor import Reducer, ReducerConfig, ReduceRole
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import GENERIC_TIPS, TaskSuite
from combee_core.sim.task_suite import build_suite, expected_accuracy, run_task
from streams.topology.playbook_view import used_entries_text

RESULTS = Path(__file__).parent / "results" / "learning.json"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def simulator_responder(config: SimulatorConfig):
    async def respond(request: LLMRequest) -> LLMReply:
        reply = simulate(request.messages, config, request.attempt)
        cost = reply.prompt_tokens * INPUT_COST_PER_TOKEN + reply.completion_tokens * OUTPUT_COST_PER_TOKEN
        usage = Usage(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                      cost_usd=round(cost, 12), calls=1)
        return LLMReply(text=reply.text, usage=usage, latency_s=reply.latency_s, modelled_latency_s=reply.latency_s)

    return respond


def lessons_of(suite: TaskSuite) -> dict[tuple[str, ...], str]:
    """Meaning key -> lesson name, for every family rule and generic tip of the suite."""
    named = {meaning_key(f.insight): f.family_id for f in suite.families}
    named.update({meaning_key(text): f"generic:{section}" for section, text in GENERIC_TIPS})
    return named


def bloat(suite: TaskSuite, entries) -> tuple[float, int, int]:
    """(entries / distinct lessons held, entries, distinct lessons); an entry matching no lesson counts as its own."""
    names = lessons_of(suite)
    held = {names.get(meaning_key(e.content), f"other:{e.entry_id}") for e in entries}
    return (len(entries) / len(held) if held else 1.0), len(entries), len(held)


@dataclass
class FleetRun:
    """What one simulated sync-fleet run left: the final playbook, every version, and what went through it."""

    playbook: Playbook
    versions: list[PlaybookVersion] = field(default_factory=list)
    reflect_usage: Usage = field(default_factory=Usage)
    traces: list[Trace] = field(default_factory=list)
    reflections: list[Reflection] = field(default_factory=list)


async def fleet(suite: TaskSuite, sim: SimulatorConfig, settings: CombeeSettings, *, batch: int, traces: int,
                seed: int, rewrite: Callable[[list[Operation]], list[Operation]] | None = None,
                make_reducer: Callable[[ReduceRole], Reducer] | None = None) -> FleetRun:
    """A sync fleet: each round, ``batch`` agents run the next train tasks with the current version; the round's
    traces go through one round of the method (``combee_core.method``: reflect, shuffle, aggregate, reduce, control,
    with ``settings``; the roles read the version as context when ``settings.llm_context``).

    ``rewrite``: a benchmark-side change of every partial's operations before the reduce (e.g. an oracle);
    ``make_reducer``: the reducer processor around the reduce role (default: as the reducer stage builds it)."""
    roles = LLMRoles(LLMConfig(simulator=sim), responder=simulator_responder(sim))

    async def used(trace: Trace) -> str | None:
        entries = trace.metadata.get("used_entries")
        if not (settings.llm_context and entries):
            return None
        return used_entries_text(method.playbook("bench"), entries)

    def between(partials: list[PartialUpdate]) -> list[PartialUpdate]:
        assert rewrite is not None
        return [p.model_copy(update={"operations": rewrite(list(p.operations))}) for p in partials]

    method = Method(roles, settings, used_entries=used, make_reducer=make_reducer)
    out = FleetRun(method.playbook("bench"))
    done = 0
    while done < traces:
        playbook = method.playbook("bench")
        size = min(batch, traces - done)
        round_traces = []
        for i in range(done, done + size):
            task = suite.train[i % len(suite.train)]
            round_traces.append(run_task(suite, task, playbook.entries, playbook_id="bench",
                                         playbook_version=playbook.version, agent_id=f"agent{i % 40:02d}",
                                         attempt=i // len(suite.train), run_seed=seed))
        done += size
        step = await method.round("bench", round_traces, now=NOW, between=between if rewrite is not None else None)
        out.reflect_usage += sum((r.usage for r in step.reflections), Usage())
        out.traces += round_traces
        out.reflections += step.reflections
        if step.version is not None:
            out.versions.append(step.version)
        out.playbook = method.playbook("bench")
    return out


def settings_for(*, context: bool, budget: int, context_tokens: int, delete_cap: float, seed: int,
                 **overrides: Any) -> CombeeSettings:
    """The production defaults (no environment read: fan-in, p, k, the reducer's curation and caps), with what this
    benchmark varies: context on or off, the budget, the change cap, the seed. Curation is lexical
    (``embedding_model=none``): the question here is what context and the playbook's own paraphrase consolidation
    do; curation by meaning is measured by ``bench.semantic_pipeline`` and ``bench.honest_learning``."""
    return CombeeSettings.load(env={}, llm_context=context, llm_context_tokens=context_tokens,
                               playbook_budget_tokens=budget, playbook_change_cap=delete_cap, run_seed=seed,
                               embedding_model="none", **overrides)


async def run(batch: int, context: bool, *, consolidate: bool = True, traces: int, paraphrases: int, budget: int,
              context_tokens: int, delete_cap: float, seed: int) -> dict[str, Any]:
    suite = build_suite(seed=7)
    sim = SimulatorConfig(seed=seed, paraphrases=paraphrases, mode="virtual")
    settings = settings_for(context=context, budget=budget, context_tokens=context_tokens, delete_cap=delete_cap,
                            seed=seed)
    lexical = None if consolidate else (
        lambda role: Reducer(replace(ReducerConfig.from_settings(settings), paraphrases=False), role))
    done = await fleet(suite, sim, settings, batch=batch, traces=traces, seed=seed, make_reducer=lexical)
    playbook, versions, reflect_usage = done.playbook, done.versions, done.reflect_usage
    ratio, entries, distinct = bloat(suite, playbook.entries)
    worst = max(bloat(suite, v.entries)[0] for v in versions)
    evictions = sum(1 for v in versions for a in v.operations if a.reason.startswith("evicted"))
    return {
        "batch": batch, "context": context, "lexical": consolidate, "versions": len(versions), "traces": traces,
        "entries": entries, "distinct_lessons": distinct, "entries_per_lesson": round(ratio, 3),
        "max_entries_per_lesson": round(worst, 3),
        "playbook_tokens_final": playbook_tokens(playbook),
        "playbook_tokens_max": max(v.stats.playbook_tokens for v in versions),
        "completion_tokens_per_version": round(statistics.mean(v.stats.completion_tokens for v in versions), 1),
        "prompt_tokens_per_version": round(statistics.mean(v.stats.prompt_tokens for v in versions), 1),
        "llm_time_per_version_s": round(statistics.mean(v.stats.llm_critical_path_s for v in versions), 3),
        "reflect_prompt_tokens": reflect_usage.prompt_tokens,
        "evictions": evictions,
        "held_out_accuracy": round(expected_accuracy(suite, suite.held_out, playbook.entries), 4),
    }


COLUMNS = [("batch", "batch"), ("context", "context"), ("lexical", "lexical"), ("versions", "versions"),
           ("entries", "entries"), ("distinct_lessons", "lessons"), ("entries_per_lesson", "entries/lesson"),
           ("max_entries_per_lesson", "max e/l"), ("playbook_tokens_max", "pb tokens max"),
           ("completion_tokens_per_version", "compl tok/v"), ("prompt_tokens_per_version", "prompt tok/v"),
           ("llm_time_per_version_s", "LLM s/v"), ("evictions", "evicted"), ("held_out_accuracy", "held-out acc")]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(str(row[key]) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    # the reducer's warnings per version (change cap reached, evictions limited) are counted in the figures
    logging.getLogger("combee_core.reduce.processor").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=960, help="traces per run (two passes over the 480 train tasks)")
    parser.add_argument("--batches", default="3,40,100")
    parser.add_argument("--paraphrases", type=int, default=4)
    parser.add_argument("--budget", type=int, default=8000, help="playbook budget in tokens")
    parser.add_argument("--small-budget", type=int, default=300, help="a second batch-40 run within this budget")
    parser.add_argument("--context-tokens", type=int, default=8000)
    parser.add_argument("--delete-cap", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    common = dict(traces=args.traces, paraphrases=args.paraphrases, context_tokens=args.context_tokens,
                  delete_cap=args.delete_cap, seed=args.seed)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        for context, consolidate in ((True, True), (False, True), (True, False), (False, False)):
            rows.append(asyncio.run(run(batch, context, consolidate=consolidate, budget=args.budget, **common)))
    small = [asyncio.run(run(40, True, budget=args.small_budget, **common))]
    print(f"budget {args.budget} tokens, reflections in {args.paraphrases} wordings, {args.traces} traces per run")
    print(table(rows))
    print(f"\nbatch 40 with context within a {args.small_budget}-token budget")
    print(table(small))
    write_results(args.out, {"args": vars(args) | {"out": str(args.out)}, "rows": rows, "small_budget": small,
                             "machine": machine()})


if __name__ == "__main__":
    main()
