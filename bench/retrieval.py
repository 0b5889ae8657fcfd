"""Retrieval (issue 28 item 4): the entries a task needs from a playbook larger than a prompt, against the whole
playbook cut to the same token budget, scored by the simulator's honest mode (what entries state, by the registry;
never the similarity retrieval or curation uses).

    python -m bench.retrieval            # 3 compositions, k = 4, 8, 12, 24, budget 1,000; bench/results/retrieval.json
    python -m bench.retrieval --seeds 0 --budget 500

The playbook (per composition seed) is what a long run could have grown, written from the registry's texts of the
32-family honest suite (``build_suite(32, feedback="honest")``, ``combee_core.sim.sim_registry``): for every family 58
of the 60 wordings of its rule, 3 of its 9 hints, the 12 generic tips, and for 8 families (drawn) 3 wordings of the
*opposite* rule, with helpful/harmful counters drawn as a reflector would have tagged them (rules helpful 0-6 and
harmful 0-2, opposites helpful 0-1 and harmful 1-4, hints helpful 0-2): 1,988 entries, about 53,000 tokens.

Each of the 160 held-out tasks (5 per family) is given, within the budget:

- nothing (the empty playbook);
- the whole playbook cut to the budget (``render_playbook``: by helpful - harmful, then playbook order), the same
  text for every task;
- the top k by lexical relevance to the task's text (``render_for_task``: IDF-weighted shared content words);
- the top k by the cosine of the offline static embedding (``render_for_task(embedder=StaticEmbedder())``).

Accuracy is the simulator's expected held-out accuracy (``honest_suite.probability``: 0.95 when the entries given
state the task's rule, ``harmful_p`` when only its opposite, 0.5 with both, else the family's base rate). Tokens per
call are the rendered playbook's (``estimate_tokens``) plus the task's; ms per call is the CPU time of ranking and
rendering with the version's ``RetrievalIndex`` (built once per version, as the client does; its build time is
printed apart).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import machine, mean_spread, write_results
from combee_core.models import PlaybookEntry
from combee_core.playbook.embedding import Embedder, StaticEmbedder
from combee_core.playbook.render import estimate_tokens, render_in_priority, render_playbook
from combee_core.playbook.retrieval import RetrievalIndex
from combee_core.playbook.value import Playbook
from combee_core.sim import honest_suite
from combee_core.sim.sim_registry import TextRegistry
from combee_core.sim.suite import Task, TaskSuite
from combee_core.sim.task_suite import build_suite

RESULTS = Path(__file__).parent / "results" / "retrieval.json"
FAMILIES = 32
"""The most the honest registry holds (its 32 subjects each have hand-written phrasings)."""
RULE_WORDINGS = 58
OPPOSED_FAMILIES = 8
OPPOSITE_WORDINGS = 3
HINTS_PER_FAMILY = 3


def grown_playbook(suite: TaskSuite, registry: TextRegistry, seed: int) -> Playbook:
    """The composition described in the module docstring, deterministic for ``seed``."""
    rng = random.Random(seed)
    texts: list[tuple[str, str, int, int]] = []  # (section, content, helpful, harmful)
    opposed = set(rng.sample([f.family_id for f in suite.families], OPPOSED_FAMILIES))
    for family in suite.families:
        section = registry.sections[family.family_id]
        for text in rng.sample(registry.wordings[(family.family_id, 1)], RULE_WORDINGS):
            texts.append((section, text, rng.randint(0, 6), rng.randint(0, 2)))
        if family.family_id in opposed:
            for text in rng.sample(registry.wordings[(family.family_id, -1)], OPPOSITE_WORDINGS):
                texts.append((section, text, rng.randint(0, 1), rng.randint(1, 4)))
        for text in rng.sample(registry.hints[family.family_id], HINTS_PER_FAMILY):
            texts.append((section, text, rng.randint(0, 2), 0))
    for section, wordings in registry.generics:
        texts.extend((section, text, rng.randint(0, 6), 0) for text in wordings)
    rng.shuffle(texts)
    entries = [PlaybookEntry(entry_id=f"e-{n:05d}", section=section, content=content, helpful=helpful,
                             harmful=harmful, created_version=1, updated_version=1)
               for n, (section, content, helpful, harmful) in enumerate(texts)]
    return Playbook.from_entries("bench", 1, entries)


@dataclass
class Given:
    """What one variant gave the held-out tasks."""

    probabilities: list[float]
    tokens: list[int]
    right: int = 0
    wrong: int = 0
    seconds: float = 0.0

    def row(self) -> dict[str, float]:
        calls = len(self.probabilities)
        return {"accuracy": statistics.fmean(self.probabilities), "tokens_per_call": statistics.fmean(self.tokens),
                "rule_given": self.right / calls, "opposite_given": self.wrong / calls,
                "ms_per_call": 1000 * self.seconds / calls}


def _give(suite: TaskSuite, task: Task, entries: Sequence[PlaybookEntry], tokens: int, given: Given) -> None:
    hold = honest_suite.holdings(suite, entries).get(task.family_id)
    given.probabilities.append(honest_suite.probability(suite, task.family_id, hold))
    given.tokens.append(tokens + estimate_tokens(task.prompt))
    given.right += bool(hold and hold.right)
    given.wrong += bool(hold and hold.wrong)


def run_composition(suite: TaskSuite, registry: TextRegistry, seed: int, ks: Sequence[int], budget: int,
                    embedder: Embedder) -> dict[str, dict[str, float]]:
    playbook = grown_playbook(suite, registry, seed)
    by_id = {e.entry_id: e for e in playbook.entries}
    variants: dict[str, Given] = {"empty playbook": Given([], [])}
    whole = render_playbook(playbook, token_budget=budget)
    whole_entries = [by_id[i] for i in whole.included_entry_ids]
    variants[f"whole playbook, cut to {budget:,} tokens"] = Given([], [])
    for method in ("lexical", "embedding"):
        for k in ks:
            variants[f"{method} top {k}"] = Given([], [])
    indexes, build_ms = {}, {}
    for method in ("lexical", "embedding"):
        started = time.process_time()
        indexes[method] = RetrievalIndex.build(playbook, embedder if method == "embedding" else None)
        build_ms[method] = 1000 * (time.process_time() - started)
    for task in suite.held_out:
        _give(suite, task, [], 0, variants["empty playbook"])
        _give(suite, task, whole_entries, whole.tokens, variants[f"whole playbook, cut to {budget:,} tokens"])
        for method in ("lexical", "embedding"):
            started = time.process_time()
            ranked = indexes[method].rank(task.prompt)
            ranking_s = time.process_time() - started
            for k in ks:
                started = time.process_time()
                rendered = render_in_priority(playbook, ranked[:k], budget)  # = index.render(task, k=k, budget)
                given = variants[f"{method} top {k}"]
                given.seconds += ranking_s + time.process_time() - started
                _give(suite, task, [by_id[i] for i in rendered.included_entry_ids], rendered.tokens, given)
    rows = {name: given.row() for name, given in variants.items()}
    rows["whole playbook, no budget"] = {
        "accuracy": honest_suite.expected_accuracy(suite, suite.held_out, playbook.entries),
        "tokens_per_call": float(render_playbook(playbook).tokens), "rule_given": 1.0,
        "opposite_given": OPPOSED_FAMILIES / FAMILIES, "ms_per_call": 0.0}
    rows["_playbook"] = {"entries": float(len(playbook.entries)), "tokens": float(render_playbook(playbook).tokens),
                         **{f"index_build_ms_{method}": ms for method, ms in build_ms.items()}}
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8, 12, 24])
    parser.add_argument("--budget", type=int, default=1000)
    args = parser.parse_args(argv)
    suite = build_suite(FAMILIES, seed=7, feedback="honest")
    registry = honest_suite.suite_registry(suite)
    embedder = StaticEmbedder()
    runs = [run_composition(suite, registry, seed, args.ks, args.budget, embedder) for seed in args.seeds]
    names = [name for name in runs[0] if not name.startswith("_")]
    table: dict[str, dict[str, float]] = {}
    shape = runs[0]["_playbook"]
    print(f"playbook: {shape['entries']:.0f} entries, {shape['tokens']:,.0f} tokens; {len(suite.held_out)} held-out "
          f"tasks; budget {args.budget:,} tokens; seeds {args.seeds}; index built once per version in "
          f"{shape['index_build_ms_lexical']:.0f} ms (lexical), {shape['index_build_ms_embedding']:.0f} ms (embedding)")
    print("| given to each task | held-out accuracy | rule given | opposite given | tokens per call | ms per call |")
    print("|---|---|---|---|---|---|")
    for name in names:
        accuracy, spread = mean_spread([run[name]["accuracy"] for run in runs])
        row = {key: statistics.fmean(run[name][key] for run in runs) for key in runs[0][name]}
        table[name] = {**row, "accuracy_sd": spread}
        print(f"| {name} | {accuracy:.3f} ± {spread:.3f} | {row['rule_given']:.0%} | {row['opposite_given']:.0%} | "
              f"{row['tokens_per_call']:,.0f} | {row['ms_per_call']:.1f} |")
    payload = {"machine": machine(), "args": vars(args), "families": FAMILIES, "held_out_tasks": len(suite.held_out),
               "playbook": runs[0]["_playbook"], "table": table}
    write_results(RESULTS, payload)
    return payload


if __name__ == "__main__":
    main()
