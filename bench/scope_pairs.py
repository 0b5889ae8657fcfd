"""The semantic judge's verdicts on pairs of the honest simulator's rule wordings, labelled by the registry (which
family and polarity each wording states), with and without the scope test (``combee_core/playbook/scope.py``).

    python -m bench.scope_pairs             # 800 random pairs per kind, seed 0: bench/results/scope_pairs.json

Kinds: *sibling* (two families with one action and different subjects: "For negative numbers, treat an empty cell as
missing" / "For retry limits, ..."; must not be "same"), *other* (two random families), *same* (two wordings of one
family's rule: should be "same"), *flip* (a family's rule and a wording of its opposite: must not be "same"). The
judge is the one the reducer builds (all-MiniLM-L6-v2 int8); "old" is the same judge with the scope test switched
off, at 0.55 (the model's threshold before) and at 0.5 (its threshold now). The labels come from the registry,
never from the similarity curation uses.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.sim.sim_registry import TextRegistry, registry_for

KINDS = ("sibling", "other", "same", "flip")
RESULTS = "scope_pairs.json"


def draw(registry: TextRegistry, kind: str, count: int, rng: random.Random) -> list[tuple[str, str]]:
    families = sorted({family for family, _ in registry.wordings})
    pairs: list[tuple[str, str]] = []
    while len(pairs) < count:
        a, b = rng.sample(families, 2)
        if kind == "sibling" and registry.actions[a] != registry.actions[b]:
            continue
        if kind in ("sibling", "other"):
            pairs.append((rng.choice(registry.wordings[(a, 1)]), rng.choice(registry.wordings[(b, 1)])))
        elif kind == "same":
            x, y = rng.sample(registry.wordings[(a, 1)], 2)
            pairs.append((x, y))
        else:
            pairs.append((rng.choice(registry.wordings[(a, 1)]), rng.choice(registry.wordings[(a, -1)])))
    return pairs


def main() -> None:
    registry = registry_for(7, 24)  # the honest benchmark's suite (build_suite(seed=7), 24 families)
    embedder = MiniLMEmbedder()
    results: dict[str, Any] = {}
    print("| judge | kind | pairs | same | conflict | distinct |")
    print("|---|---|---|---|---|---|")
    for label, scope_test, threshold in (("old, 0.55", False, 0.55), ("old, 0.5", False, 0.5),
                                         ("scope test, 0.55", True, 0.55), ("scope test, 0.5 (now)", True, 0.5)):
        judge = SemanticJudge(EmbeddingCache(embedder), threshold)
        if not scope_test:
            judge._scopes_differ = lambda new, texts: None  # type: ignore[method-assign]
        rng = random.Random(0)
        for kind in KINDS:
            pairs = draw(registry, kind, 800, rng)
            judge.prepare([text for pair in pairs for text in pair])
            counts = Counter(judge.judge(a, "s", b, "s").kind for a, b in pairs)
            shares = {k: round(counts[k] / len(pairs), 3) for k in ("same", "conflict", "distinct")}
            results.setdefault(label, {})[kind] = shares
            print(f"| {label} | {kind} | {len(pairs)} | {shares['same']} | {shares['conflict']} | "
                  f"{shares['distinct']} |")
    write_results(Path(__file__).parent / "results" / RESULTS,
                  {"results": results, "machine": machine()})


if __name__ == "__main__":
    main()
