"""How well does the playbook's lexical paraphrase test (``combee_core.playbook.is_paraphrase``) catch one lesson in
other words, and how often does it merge two different lessons?

    python -m bench.paraphrase_catch         # instant; writes bench/results/paraphrase_catch.json

Three sets of pairs: ``bench/data/paraphrase_pairs.jsonl`` (30 paraphrases, 30 near-misses: the development set,
looked at while the method was written), ``bench/data/paraphrase_pairs_heldout.jsonl`` (20 + 20 written after the
method was frozen, measured once), and the simulator's own rewordings of the suite's 28 lessons (every pair of its
four templates: in-distribution by construction, so an upper bound, not evidence). A pair counts as caught when
the playbook would consolidate it: ``is_near_duplicate`` (always on) or ``is_paraphrase``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from bench.common import machine, write_results
from combee_core.llm.paraphrase import paraphrase
from combee_core.playbook import is_near_duplicate, is_paraphrase
from combee_core.sim.suite import GENERIC_TIPS
from combee_core.sim.task_suite import build_suite

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "paraphrase_catch.json"


def consolidated(a: str, b: str) -> bool:
    return is_near_duplicate(a, b) or is_paraphrase(a, b)


def measure(pairs: list[dict]) -> dict:
    same = [p for p in pairs if p["same"]]
    different = [p for p in pairs if not p["same"]]
    caught = [p for p in same if consolidated(p["a"], p["b"])]
    merged = [p for p in different if consolidated(p["a"], p["b"])]
    near_only = sum(1 for p in same if is_near_duplicate(p["a"], p["b"]))
    return {"paraphrases": len(same), "caught": len(caught), "catch_rate": round(len(caught) / len(same), 3),
            "caught_by_near_duplicate_alone": near_only,
            "different": len(different), "false_merges": len(merged),
            "false_merge_rate": round(len(merged) / len(different), 3) if different else 0.0,
            "missed": [[p["a"], p["b"]] for p in same if p not in caught],
            "wrongly_merged": [[p["a"], p["b"]] for p in merged]}


def simulator_pairs() -> list[dict]:
    suite = build_suite(seed=7)
    texts = [f.insight for f in suite.families] + [text for _, text in GENERIC_TIPS]
    pairs = [{"a": paraphrase(t, i), "b": paraphrase(t, j), "same": True}
             for t in texts for i, j in itertools.combinations(range(4), 2)]
    pairs += [{"a": paraphrase(a, i), "b": paraphrase(b, i), "same": False}
              for a, b in itertools.combinations(texts, 2) for i in range(4)]
    return pairs


def main() -> None:
    results = {}
    for name, pairs in (
        ("development", [json.loads(line) for line in (DATA / "paraphrase_pairs.jsonl").open()]),
        ("held_out", [json.loads(line) for line in (DATA / "paraphrase_pairs_heldout.jsonl").open()]),
        ("simulator_templates", simulator_pairs()),
    ):
        results[name] = measure(pairs)
    print("| set | paraphrase pairs | caught | catch rate | (near-duplicate alone) | different-lesson pairs | "
          "wrongly merged | false-merge rate |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['paraphrases']} | {r['caught']} | {r['catch_rate']:.0%} | "
              f"{r['caught_by_near_duplicate_alone']} | {r['different']} | {r['false_merges']} | "
              f"{r['false_merge_rate']:.1%} |")
    write_results(RESULTS, {"results": results, "machine": machine()})


if __name__ == "__main__":
    main()
