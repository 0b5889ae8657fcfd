"""Catch rate and false-merge rate of curation's lesson judges on hand-written lessons in several wordings.

    python -m bench.semantic_catch                # held-out set: bench/data/lessons_heldout.json
    python -m bench.semantic_catch --set dev      # the dev set the thresholds were tuned on
    python -m bench.semantic_catch --show         # also list every miss and false merge

Pairs: every two wordings of one lesson (should be consolidated), every two wordings of two different lessons
(should not), the set's opposite pairs (one-word and reworded flips: must not be consolidated) and corrections
(a rule and its correction: must not be consolidated). Methods: ``lexical`` (the old test: ``is_near_duplicate`` or
``is_paraphrase``, all pairs taken as one section), ``lexical+conflict`` (:class:`LexicalJudge`, no model),
``static`` (:class:`SemanticJudge` over the static model, ``combee-static/wordllama-l2-256``) and ``semantic`` (the
default: :class:`SemanticJudge` over all-MiniLM-L6-v2, ``combee-onnx/all-minilm-l6-v2-int8``), each model at its
own threshold unless ``--same-meaning`` is given. Writes
``bench/results/semantic_catch_<set>.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import machine, write_results
from combee_core.playbook import is_near_duplicate, is_paraphrase
from combee_core.playbook.embedding import EmbeddingCache, StaticEmbedder
from combee_core.playbook.meaning import LexicalJudge, SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results"
SETS = {"heldout": DATA / "lessons_heldout.json", "heldout_b": DATA / "lessons_heldout_b.json",
        "heldout_c": DATA / "lessons_heldout_c.json", "heldout_d": DATA / "lessons_heldout_d.json",
        "heldout_e": DATA / "lessons_heldout_e.json", "heldout_f": DATA / "lessons_heldout_f.json",
        "dev": DATA / "lessons_dev.json"}


def pairs_of(data: dict) -> dict[str, list[tuple[str, str]]]:
    lessons = [lesson["texts"] for lesson in data["lessons"]]
    return {
        "paraphrase": [pair for texts in lessons for pair in itertools.combinations(texts, 2)],
        "other_lesson": [(a, b) for x, y in itertools.combinations(lessons, 2) for a in x for b in y],
        "opposite_one_word": [(o["a"], o["b"]) for o in data["opposites"] if o["kind"] == "one-word"],
        "opposite_reworded": [(o["a"], o["b"]) for o in data["opposites"] if o["kind"] == "reworded"],
        "correction": [(c["rule"], c["correction"]) for c in data.get("corrections", [])],
    }


def methods(same_meaning: float | None = None) -> dict[str, Callable[[str, str], bool]]:
    lexical = LexicalJudge()
    static = SemanticJudge(EmbeddingCache(StaticEmbedder()), same_meaning)
    semantic = SemanticJudge(EmbeddingCache(MiniLMEmbedder()), same_meaning)
    return {
        "lexical": lambda a, b: is_near_duplicate(a, b) or is_paraphrase(a, b),
        "lexical+conflict": lambda a, b: lexical.judge(a, "s", b, "s").kind == "same",
        "static": lambda a, b: static.judge(a, "s", b, "s").kind == "same",
        "semantic": lambda a, b: semantic.judge(a, "s", b, "s").kind == "same",
    }


def measure(pairs: dict[str, list[tuple[str, str]]], consolidated: Callable[[str, str], bool]) -> dict:
    out: dict = {}
    for name, items in pairs.items():
        # both directions: a judge must not depend on which text is the new one
        merged = [(a, b) for a, b in items if consolidated(a, b) or consolidated(b, a)]
        out[name] = {"pairs": len(items), "consolidated": len(merged),
                     "rate": round(len(merged) / len(items), 3) if items else 0.0, "which": merged}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="heldout")
    parser.add_argument("--show", action="store_true", help="list misses and false merges")
    parser.add_argument("--same-meaning", type=float, default=None,
                        help="both models' threshold (a sensitivity check: unset, each model's tuned one)")
    args = parser.parse_args()
    data = json.loads(SETS[args.set].read_text())
    pairs = pairs_of(data)
    results = {}
    for name, consolidated in methods(args.same_meaning).items():
        started = time.perf_counter()
        results[name] = measure(pairs, consolidated)
        results[name]["seconds"] = round(time.perf_counter() - started, 3)
    print(f"set: {args.set} ({SETS[args.set].name}), same_meaning {args.same_meaning or 'per model'}; "
          "consolidated share per kind of pair (either direction)")
    print("| method | paraphrase pairs caught | other-lesson pairs merged | one-word opposites merged | "
          "reworded opposites merged | corrections merged |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        cells = [f"{r[k]['consolidated']}/{r[k]['pairs']} ({r[k]['rate']:.0%})" for k in pairs]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.show:
        semantic = results["semantic"]
        missed = [p for p in pairs["paraphrase"] if p not in semantic["paraphrase"]["which"]]
        print("\nsemantic misses:", *(f"  {a} | {b}" for a, b in missed), sep="\n")
        for kind in ("other_lesson", "opposite_one_word", "opposite_reworded", "correction"):
            print(f"\nsemantic merged {kind}:", *(f"  {a} | {b}" for a, b in semantic[kind]["which"]), sep="\n")
    suffix = "" if args.same_meaning is None else f"_at_{args.same_meaning}"
    write_results(RESULTS / f"semantic_catch_{args.set}{suffix}.json",
                  {"set": args.set, "same_meaning": args.same_meaning, "results": results, "machine": machine()})


if __name__ == "__main__":
    main()
