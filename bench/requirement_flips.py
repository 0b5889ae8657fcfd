"""What the checks of a rule flipped in other words call a conflict, pair by pair (issue 38): the requirement check
(``combee_core.playbook.requirements``) and the replaced-tool check (``combee_core.playbook.instruments``).

    python -m bench.requirement_flips                     # every lesson set and both pair files
    python -m bench.requirement_flips --sets lessons_dev  # one set

For each set of ``bench/data``, with the default judge (``SemanticJudge`` over all-MiniLM-L6-v2): every pair of
wordings of one lesson (a conflict there is false: a restatement taken for a correction), every pair of wordings of
two different lessons (false: a pending challenge that could let one lesson replace another), the opposite pairs and
the corrections (each rule against its correction: a conflict is right). Counted: the pairs the requirement check
calls a conflict (the verdict's reason starts with ``requirement:``), those the replaced-tool check calls one
(``instrument``), and the pairs the judge calls a conflict by any check. The pair files (``paraphrase_pairs*.jsonl``)
count their "same" and "distinct" pairs alike. Scoring is by the sets' labels. Pairs only: what a conflict does
through the reducer is ``bench.naive_pipeline``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "requirement_flips.json"
SETS = ["lessons_dev", "lessons_tuning", "lessons_heldout", "lessons_heldout_b", "lessons_heldout_c",
        "lessons_heldout_d", "lessons_heldout_e", "lessons_heldout_f", "lessons_heldout_g", "lessons_heldout_h",
        "lessons_heldout_i"]
PAIRS = ["paraphrase_pairs.jsonl", "paraphrase_pairs_heldout.jsonl"]
FLIP = "requirement:"
TOOL = "instrument"


def _count(judge: SemanticJudge, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    judge.prepare([text for pair in pairs for text in pair])
    verdicts = [(a, b, judge.judge(b, "rules", a, "rules")) for a, b in pairs]
    flips = [(a, b, v.reason) for a, b, v in verdicts if v.kind == "conflict" and v.reason.startswith(FLIP)]
    tools = [(a, b, v.reason) for a, b, v in verdicts if v.kind == "conflict" and v.reason.startswith(TOOL)]
    return {"pairs": len(pairs), "conflicts": sum(v.kind == "conflict" for _, _, v in verdicts),
            "requirement_conflicts": len(flips), "flipped": flips, "instrument_conflicts": len(tools),
            "swapped": tools,
            "all_conflicts": [(a, b, v.reason) for a, b, v in verdicts if v.kind == "conflict"]}


def measure_set(judge: SemanticJudge, data: dict[str, Any]) -> dict[str, Any]:
    lessons = [lesson["texts"] for lesson in data["lessons"]]
    return {
        "one_lesson": _count(judge, [p for texts in lessons for p in itertools.combinations(texts, 2)]),
        "two_lessons": _count(judge, [(a, b) for x, y in itertools.combinations(lessons, 2) for a in x for b in y]),
        "opposites": _count(judge, [(o["a"], o["b"]) for o in data.get("opposites", [])]),
        "corrections": _count(judge, [(c["rule"], c["correction"]) for c in data.get("corrections", [])]),
    }


def measure_pairs(judge: SemanticJudge, name: str) -> dict[str, Any]:
    pairs = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    return {"same": _count(judge, [(p["a"], p["b"]) for p in pairs if p["same"]]),
            "distinct": _count(judge, [(p["a"], p["b"]) for p in pairs if not p["same"]])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS, help="files of bench/data, no suffix")
    parser.add_argument("--pairs", nargs="*", default=PAIRS)
    parser.add_argument("--out", default=RESULTS.name, help="results file name under bench/results")
    args = parser.parse_args()
    judge = SemanticJudge(EmbeddingCache(MiniLMEmbedder()))
    results: dict[str, Any] = {name: measure_set(judge, json.loads((DATA / f"{name}.json").read_text()))
                               for name in args.sets}
    results.update({name: measure_pairs(judge, name) for name in args.pairs})
    print(f"requirement conflicts / replaced-tool conflicts / all conflicts / pairs; judge: MiniLM, same_meaning "
          f"{judge.same_meaning}, related {judge.related}")
    print("| data | one lesson (false) | two lessons (false) | opposites | corrections |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        cells = [r.get(k) for k in ("one_lesson", "two_lessons", "opposites", "corrections")] if "same" not in r \
            else [r["same"], r["distinct"], None, None]
        print(f"| {name} | " + " | ".join(
            "-" if c is None or not c["pairs"] else
            f"{c['requirement_conflicts']} / {c['instrument_conflicts']} / {c['conflicts']} / {c['pairs']}"
            for c in cells) + " |")
    write_results(RESULTS.with_name(args.out), {"args": vars(args), "results": results, "machine": machine()})


if __name__ == "__main__":
    main()
