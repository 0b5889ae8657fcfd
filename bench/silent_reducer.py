"""What a reducer call that says nothing does to consolidation (issue 38 item 3, "silence is no decision").

    python -m bench.silent_reducer      # writes bench/results/silent_reducer.json

For each hand-written pair of ``bench/data/paraphrase_pairs.jsonl`` and ``paraphrase_pairs_heldout.jsonl`` (one
lesson in two wordings, ``same``; or two lessons, not ``same``): a playbook holding the first wording (helpful 4),
and a batch whose partial ADDs the second (support 2, two traces), through ``Reducer.next_version`` with the offline
default embedder (all-MiniLM-L6-v2). Reducers: the judge alone (``ask_reducer`` off, as with the simulator), and a
real-model path whose reducer call is a stand-in that echoes what it reads (a naive model that merges nothing).
Counted: pairs consolidated (the ADD applied to the entry: no second entry, and not rejected as a conflict) and
pairs whose entry's counters rose. The stand-in is no LLM: it
shows what the curation does with a silent answer, not what a model would answer.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, Usage
from combee_core.playbook import Playbook
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "silent_reducer.json"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def _silent(children: list[list[Operation]], context: str) -> ReduceOutcome:
    return ReduceOutcome([op for child in children for op in child], Usage(calls=1), 0.0)


def _one(reducer: Reducer, old: str, new: str) -> tuple[bool, bool]:
    playbook = Playbook.from_entries("pb", 1, [PlaybookEntry(entry_id="gen-00001", section="general", content=old,
                                                             helpful=4, created_version=1, updated_version=1)])
    partial = PartialUpdate(playbook_id="pb", batch_id=1, node=0, k=1, base_version=1,
                            operations=[AddOp(section="general", content=new, support=2)], reflection_ids=["r1", "r2"],
                            trace_ids=["t1", "t2"], items_read=2, expected_items=2, batch_closed_at=NOW)
    effects = asyncio.run(reducer.next_version(playbook, [partial], parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    entry = next((e for e in record.entries if e.entry_id == "gen-00001"), None)
    folded = any(a.outcome == "applied" and a.entry_id == "gen-00001" and isinstance(a.operation, AddOp)
                 for a in record.operations)  # not a rejection as a conflict: the ADD went into the entry
    return folded, entry is not None and entry.helpful > 4


def main() -> None:
    pairs = [json.loads(line) for name in ("paraphrase_pairs.jsonl", "paraphrase_pairs_heldout.jsonl")
             for line in (DATA / name).read_text().splitlines() if line.strip()]
    embedder = MiniLMEmbedder()
    results: dict[str, Any] = {}
    print("| reducer | same-lesson pairs consolidated | their entry reinforced | two-lesson pairs consolidated |")
    print("|---|---|---|---|")
    for label, ask in (("judge alone", False), ("silent reducer call", True)):
        reducer = Reducer(ReducerConfig(ask_reducer=ask), _silent, embedder)
        outcomes = [(pair["same"], *_one(reducer, pair["a"], pair["b"])) for pair in pairs]
        same = [o for o in outcomes if o[0]]
        other = [o for o in outcomes if not o[0]]
        row = {"same_pairs": len(same), "same_consolidated": sum(o[1] for o in same),
               "same_reinforced": sum(o[2] for o in same), "other_pairs": len(other),
               "other_consolidated": sum(o[1] for o in other)}
        results[label] = row
        print(f"| {label} | {row['same_consolidated']}/{row['same_pairs']} | {row['same_reinforced']}/"
              f"{row['same_pairs']} | {row['other_consolidated']}/{row['other_pairs']} |")
    write_results(RESULTS, {"results": results, "machine": machine()})


if __name__ == "__main__":
    main()
