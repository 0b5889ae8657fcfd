"""CPU cost of consolidating entries (``combee_core.playbook.consolidation``) after one version, 200 entries.

    python -m bench.consolidation_cost          # bench/results/consolidation_cost.json

The playbook: 200 entries, each one wording of the seen sets (lessons_dev, lessons_tuning, held-out A-G; never H or
I), in a fixed shuffled order, no aliases, so many pairs are wordings of one lesson (a worst case: the naive pipeline's
entries hold 3-4 aliases each and far fewer pairs of one lesson). The judge: MiniLM after a silent reducer call
(``UncertainJudge.trusting``), every text embedded beforehand (embedding is paid once per text in the reducer anyway).
Timed: ``consolidate`` alone, with ``--fresh`` entries changed in this version (the pairs it compares have a fresh
side), best of ``--repeat`` runs; a process CPU clock. Not shown: a hosted embedder, entries with many aliases (each
pair compares every wording of one with the other's), the cost on the stage's loaded machine.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.models import PlaybookEntry
from combee_core.playbook import Playbook
from combee_core.playbook.consolidation import consolidate
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.uncertain import UncertainJudge
from combee_core.playbook.working_playbook import WorkingPlaybook

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "consolidation_cost.json"
SETS = ["lessons_dev", "lessons_tuning", "lessons_heldout", "lessons_heldout_b", "lessons_heldout_c",
        "lessons_heldout_d", "lessons_heldout_e", "lessons_heldout_f", "lessons_heldout_g"]


def _playbook(size: int, fresh: int) -> Playbook:
    texts = [t for name in SETS for lesson in json.loads((DATA / f"{name}.json").read_text())["lessons"]
             for t in lesson["texts"]]
    random.Random(0).shuffle(texts)
    entries = [PlaybookEntry(entry_id=f"gen-{n + 1:05d}", section="general", content=text, created_version=1,
                             updated_version=2 if n >= size - fresh else 1) for n, text in enumerate(texts[:size])]
    return Playbook.from_entries("cost", 1, entries)


def run(size: int, fresh: int, repeat: int, judge: UncertainJudge) -> dict[str, Any]:
    playbook = _playbook(size, fresh)
    judge.prepare([e.content for e in playbook.entries])
    times, merges = [], 0
    for _ in range(repeat):
        work = WorkingPlaybook(playbook, 2, judge)
        start = time.process_time()
        consolidate(work)
        times.append(time.process_time() - start)
        merges = len(work.consolidated)
    return {"entries": size, "fresh": fresh, "cpu_s_best": round(min(times), 4), "merges": merges}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--fresh", type=int, nargs="+", default=[10, 200])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    judge = UncertainJudge.trusting(SemanticJudge(EmbeddingCache(MiniLMEmbedder())))
    rows = [run(args.size, fresh, args.repeat, judge) for fresh in args.fresh]
    print(f"| entries | changed in this version | consolidate CPU s (best of {args.repeat}) | merges |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['entries']} | {row['fresh']} | {row['cpu_s_best']} | {row['merges']} |")
    write_results(RESULTS, {"args": vars(args), "rows": rows, "machine": machine()})


if __name__ == "__main__":
    main()
