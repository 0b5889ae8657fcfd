"""Entries per lesson through the reducer stage's processor with a naive model (issue 38, Done when line 1).

    python -m bench.naive_pipeline          # held-out sets A-F, 3 seeds: bench/results/naive_pipeline.json
    python -m bench.naive_pipeline --sets lessons_dev --out naive_pipeline_dev.json

The issue measured 3.9 entries per lesson "through the running pipeline with a naive model": the reducer model is not
the simulator (so ``ReducerConfig.ask_reducer`` is on and every pair the judge calls one lesson by closeness alone
goes to the reducer call), and the model merges nothing. Here:

- the naive *reflector* ADDs every wording of a hand-written set verbatim (support 1, one trace each), shuffled
  (seeded) into batches of ``--batch`` ADDs over ``--k`` partials, each wording in one of three sections by its place;
- the naive *reducer call* echoes what it reads (no merge, no TAG, no keep-apart decision: silence);
- each batch goes through ``Reducer.next_version``, the code the reducer stage runs (``ReducerConfig.from_settings``
  with ``COMBEE_REDUCER_MODEL`` a non-simulator name, the default settings otherwise: change cap, rolling budget,
  token budget), with the offline default embedder (all-MiniLM-L6-v2), one version after another.

Counted per set: entries per lesson (entries / lessons: every entry counts, whatever wording it holds), lessons with
no entry (a wording of every lesson must survive), and the aliases the entries hold. Then the Done-when line "no
correction reinforces the rule it corrects": for each correction of the set (``corrections``: the wrong rule, then a
wording of the lesson that corrects it) and each opposite pair (``opposites``: ``a`` learned, then ``b``), and the
two-lesson pairs of ``paraphrase_pairs_heldout.jsonl``, the first text is learned with support 2, then the second
arrives with support 5 through the same path: did the first entry's counters rise? And "a correction restated across
3 batches supersedes": each correction's rule learned (support 2), then the correcting lesson restated one batch at a
time (support 1 each: every wording of it, and its correction wording in 3 batches): was the rule superseded?

Not Kafka (the integration tests run the stage over Tansu; this is its processor, what it calls per batch) and no LLM:
the echo stands for a model that says nothing. Scoring is by the set's labels, never by the similarity curation uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookVersion, Usage
from combee_core.playbook import Playbook
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.settings import CombeeSettings

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "naive_pipeline.json"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
HELD_OUT = ["lessons_heldout", "lessons_heldout_b", "lessons_heldout_c", "lessons_heldout_d", "lessons_heldout_e",
            "lessons_heldout_f"]


async def _echo(children: list[list[Operation]], context: str) -> ReduceOutcome:
    """The naive reducer call: returns what it read, merges nothing, decides nothing."""
    return ReduceOutcome([op for child in children for op in child], Usage(calls=1), 0.0)


def make_reducer(embedder: MiniLMEmbedder) -> Reducer:
    settings = CombeeSettings(reducer_model="openai/naive-echo")
    config = ReducerConfig.from_settings(settings)
    assert config.ask_reducer, "a non-simulator reducer model must route the uncertain pairs to the call"
    return Reducer(config, _echo, embedder)


async def learn(reducer: Reducer, playbook: Playbook, adds: list[AddOp], k: int, batch_id: int
                ) -> tuple[Playbook, PlaybookVersion]:
    """One batch of ``adds`` over ``k`` partials through ``Reducer.next_version``; the next playbook and its record."""
    children = [c for c in (adds[i::k] for i in range(k)) if c]
    partials = []
    for node, ops in enumerate(children):
        traces = [f"t{batch_id}-{node}-{i}" for i in range(sum(op.support for op in ops))]
        partials.append(PartialUpdate(playbook_id=playbook.playbook_id, batch_id=batch_id, node=node,
                                      k=len(children), base_version=playbook.version, operations=list(ops),
                                      reflection_ids=[f"r{t[1:]}" for t in traces], trace_ids=traces,
                                      items_read=len(traces), expected_items=len(traces), batch_closed_at=NOW))
    effects = await reducer.next_version(playbook, partials, parent_version=None, manifest=None, previous_at=None,
                                         now=NOW)
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    return Playbook.from_entries(record.playbook_id, record.version, record.entries, record.next_entry_number,
                                 record.curation, baseline=record.baseline, challenges=record.challenges), record


async def entries_per_lesson(reducer: Reducer, data: dict[str, Any], batch: int, k: int, seed: int
                             ) -> dict[str, Any]:
    labels = {text: lesson["id"] for lesson in data["lessons"] for text in lesson["texts"]}
    wordings = list(labels)
    sections = {text: f"section{i % 3}" for i, text in enumerate(wordings)}
    random.Random(seed).shuffle(wordings)
    playbook = Playbook.empty(f"naive-{seed}")
    evicted = 0
    for batch_id, start in enumerate(range(0, len(wordings), batch)):
        adds = [AddOp(section=sections[t], content=t) for t in wordings[start:start + batch]]
        playbook, record = await learn(reducer, playbook, adds, k, batch_id)
        evicted += sum(1 for a in record.operations if a.operation.op == "DELETE" and "evict" in a.reason)
    kept: dict[str, int] = {}
    for entry in playbook.entries:
        kept[labels[entry.content]] = kept.get(labels[entry.content], 0) + 1
    return {"lessons": len(data["lessons"]), "wordings": len(wordings), "entries": len(playbook),
            "entries_per_lesson": round(len(playbook) / len(data["lessons"]), 3),
            "lessons_without_entry": sorted({lesson["id"] for lesson in data["lessons"]} - set(kept)),
            "aliases": sum(len(getattr(e, "aliases", ())) for e in playbook.entries), "evicted": evicted,
            "aliases_of_another_lesson": sum(1 for e in playbook.entries for a in getattr(e, "aliases", ())
                                             if labels[a] != labels[e.content]),
            "per_lesson": kept}


async def reinforced(reducer: Reducer, first: str, second: str, first_support: int = 2,
                     second_support: int = 5) -> dict[str, Any]:
    """``first`` learned, then ``second`` through the same path: did ``first``'s entry's counters rise?"""
    playbook, _ = await learn(reducer, Playbook.empty("naive-pair"),
                              [AddOp(section="rules", content=first, support=first_support)], 1, 0)
    before = playbook.entries[0]
    playbook, record = await learn(reducer, playbook, [AddOp(section="rules", content=second,
                                                             support=second_support)], 1, 1)
    after = playbook.get(before.entry_id)
    return {"first": first, "second": second,
            "reinforced": after is not None and (after.helpful > before.helpful or after.harmful > before.harmful),
            "superseded": after is None,
            "folded": any(a.entry_id == before.entry_id and a.operation.op == "ADD" and a.outcome == "applied"
                          for a in record.operations),
            "entries_after": [e.content for e in playbook.entries]}


async def restated(reducer: Reducer, rule: str, wordings: list[str]) -> dict[str, Any]:
    """``rule`` learned (support 2), then each wording of the lesson that corrects it in a batch of its own (support
    1 each): did the rule's counters ever rise? (A wording folded into the rule is kept as an alias, and later
    wordings may match that alias: such a match must raise nothing either.)"""
    playbook, _ = await learn(reducer, Playbook.empty("naive-restated"),
                              [AddOp(section="rules", content=rule, support=2)], 1, 0)
    before = playbook.entries[0]
    for batch_id, wording in enumerate(wordings, 1):
        playbook, _ = await learn(reducer, playbook, [AddOp(section="rules", content=wording)], 1, batch_id)
    after = playbook.get(before.entry_id)
    return {"rule": rule, "wordings": len(wordings), "superseded": after is None,
            "reinforced": after is not None and (after.helpful > before.helpful or after.harmful > before.harmful),
            "aliases_of_rule": [] if after is None else list(getattr(after, "aliases", ()))}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    reducer = make_reducer(MiniLMEmbedder())
    results: dict[str, Any] = {}
    for set_name in args.sets:
        data = json.loads((DATA / f"{set_name}.json").read_text())
        runs = [await entries_per_lesson(reducer, data, args.batch, args.k, seed) for seed in range(args.seeds)]
        corrections = [await reinforced(reducer, c["rule"], c["correction"]) for c in data.get("corrections", [])]
        opposites = [await reinforced(reducer, o["a"], o["b"]) for o in data.get("opposites", [])]
        lesson_of = {text: lesson["texts"] for lesson in data["lessons"] for text in lesson["texts"]}
        restatements = [await restated(reducer, c["rule"], lesson_of.get(c["correction"], [c["correction"]]))
                        for c in data.get("corrections", [])]
        three = [await restated(reducer, c["rule"], [c["correction"]] * 3) for c in data.get("corrections", [])]
        results[set_name] = {"runs": runs, "mean_entries_per_lesson": round(statistics.fmean(
            r["entries_per_lesson"] for r in runs), 3), "corrections": corrections, "opposites": opposites,
            "corrections_in_every_wording": restatements, "corrections_restated_in_3_batches": three}
    if args.pairs:
        pairs = [json.loads(line) for line in (DATA / args.pairs).read_text().splitlines() if line.strip()]
        results[args.pairs] = {"two_lesson_pairs": [await reinforced(reducer, p["a"], p["b"])
                                                    for p in pairs if not p["same"]]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=HELD_OUT, help="files of bench/data, no suffix")
    parser.add_argument("--pairs", default="paraphrase_pairs_heldout.jsonl", help="'' for none")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=RESULTS.name, help="results file name under bench/results")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the stage's per-batch lines (no manifest here) are not figures
    results = asyncio.run(main_async(args))
    print(f"batches of {args.batch} ADDs over k={args.k}, seeds 0..{args.seeds - 1}; naive reflector, echo reducer")
    print("| set | lessons | wordings | entries per seed | entries per lesson (mean) | lessons without entry | "
          "aliases (of another lesson) | corrections reinforcing the rule | ... restated in every wording | "
          "opposites reinforcing the first | corrections superseding the rule: in every wording / restated in 3 "
          "batches |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "runs" not in r:
            continue
        runs, c, o, w = r["runs"], r["corrections"], r["opposites"], r["corrections_in_every_wording"]
        print(f"| {name} | {runs[0]['lessons']} | {runs[0]['wordings']} | {'/'.join(str(x['entries']) for x in runs)}"
              f" | {r['mean_entries_per_lesson']} | {sum(len(x['lessons_without_entry']) for x in runs)} | "
              f"{'/'.join(str(x['aliases']) for x in runs)} ({sum(x['aliases_of_another_lesson'] for x in runs)}) | "
              f"{sum(x['reinforced'] for x in c)}/{len(c)} | {sum(x['reinforced'] for x in w)}/{len(w)} | "
              f"{sum(x['reinforced'] for x in o)}/{len(o)} | {sum(x['superseded'] for x in w)}/{len(w)} / "
              f"{sum(x['superseded'] for x in r['corrections_restated_in_3_batches'])}/{len(w)} |")
    for name, r in results.items():
        if "two_lesson_pairs" in r:
            p = r["two_lesson_pairs"]
            print(f"{name}: two-lesson pairs whose first entry was reinforced {sum(x['reinforced'] for x in p)}/"
                  f"{len(p)}, folded {sum(x['folded'] for x in p)}/{len(p)}")
    write_results(RESULTS.with_name(args.out), {"args": vars(args), "results": results, "machine": machine()})


if __name__ == "__main__":
    main()
