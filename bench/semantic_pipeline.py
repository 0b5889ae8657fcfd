"""What the reducer's curation makes of hand-written lessons: entries per distinct lesson, and what corrections do.

    python -m bench.semantic_pipeline            # dev, held-out A, B, C: bench/results/semantic_pipeline.json
    python -m bench.semantic_pipeline --sets lessons_heldout_d --out semantic_pipeline_d.json

The reducer's own code path, in process, without Kafka and without an LLM decision: a deliberately naive model ADDs
every wording it reads, verbatim (support 1); the wordings of all lessons are shuffled (seeded) into batches of
``--batch`` ADDs, split over ``--k`` partials; each batch goes through a round's reduce (``combee_core.method``:
the reducer stage's processor at the production defaults, fan-in 6, the deterministic merge, the caps), where a
group the merge cannot settle, a conflict, is answered by the union of its children (the naive model's reducer
call). Judges: ``lexical`` (``embedding_model=none``), ``static`` (the static model) and ``semantic`` (the offline
default, all-MiniLM-L6-v2). Before the third session this harness called the scan and ``build_version`` by hand
with fan-in 32 and no caps (docs/benchmarks.md, "Benchmarks through method.py").

``semantic+reader``: the path a real reducer model takes (``combee_core.playbook.uncertain``): pairs the judge calls
one lesson by closeness in meaning alone go to the reducer call, whose verdict stands. No LLM runs here: the call is
an *oracle reader* that knows which lesson each wording states (the set's labels) and answers as an ideal model
would (one ADD per lesson, a TAG of the entry a wording restates, a DELETE of the rule a correction corrects). It is
an upper bound of the routing, not a method: it shows that the decision reaches the version and how much the call
reads (ADDs per batch sent to it).

Corrections: the wrong rule is learned first (``--wrong-support`` ADDs of it in one batch), then its correction
arrives with ``--correction-support`` ADDs; the figures say whether the wrong rule's counters grew (they must not)
and whether the correction superseded it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from bench.common import machine, write_results
from combee_core.method import Method
from combee_core.models import AddOp, DeleteOp, Operation, PartialUpdate, TagOp, Usage
from combee_core.playbook import Playbook
from combee_core.playbook.embedding import EmbeddingCache, StaticEmbedder
from combee_core.playbook.meaning import Judge, SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.settings import CombeeSettings

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "semantic_pipeline.json"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _partial(playbook: Playbook, batch_id: int, node: int, k: int, ops: list[Operation]) -> PartialUpdate:
    # one trace behind each unit of support (the naive model ADDs each wording it reads): a contradiction's support
    # counts distinct traces (combee_core.playbook.challenges), so the partial names them
    traces = max(1, sum(op.support for op in ops if isinstance(op, AddOp)))
    return PartialUpdate(playbook_id=playbook.playbook_id, batch_id=batch_id, base_version=playbook.version,
                         node=node, k=k, operations=ops, trace_ids=[f"t{batch_id}-{node}-{i}" for i in range(traces)],
                         reflection_ids=[f"r{batch_id}-{node}-{i}" for i in range(traces)], items_read=traces,
                         expected_items=traces, batch_closed_at=NOW)


async def _union(children: list[list[Operation]]) -> ReduceOutcome:
    return ReduceOutcome(operations=[op for ops in children for op in ops], usage=Usage(), latency_s=0.0)


class OracleReader:
    """The reducer call of ``semantic+reader``: reads the contested operations as an ideal model would, from the set's
    labels (``labels``: wording -> lesson; ``corrects``: a correction's lesson -> the wrong rule's label)."""

    def __init__(self, labels: dict[str, str], corrects: dict[str, str]) -> None:
        self.labels, self.corrects = labels, corrects
        self.playbook = Playbook.empty("bench")
        self.calls = 0
        self.adds_read = 0

    async def reduce(self, children: list[list[Operation]]) -> ReduceOutcome:
        self.calls += 1
        ops = [op for child in children for op in child]
        adds = sorted((op for op in ops if isinstance(op, AddOp)), key=lambda a: (a.section, a.content))
        self.adds_read += len(adds)
        lessons: dict[str, AddOp] = {}
        for add in adds:
            label = self.labels[add.content]
            seen = lessons.get(label)
            lessons[label] = add if seen is None else seen.model_copy(update={"support": seen.support + add.support})
        out: list[Operation] = [op for op in ops if not isinstance(op, AddOp)]
        entries = {self.labels.get(e.content): e for e in self.playbook.entries}
        for label, add in lessons.items():
            if (entry := entries.get(label)) is not None:
                out.append(TagOp(entry_id=entry.entry_id, tag="helpful", count=add.support))
                continue
            if (wrong := entries.get(self.corrects.get(label))) is not None:
                out.append(DeleteOp(entry_id=wrong.entry_id))
            out.append(add)
        return ReduceOutcome(operations=out, usage=Usage(calls=1), latency_s=0.0)


class NaiveModel:
    """The model of this harness: it never reflects or aggregates (the ADDs are given), and a reducer call answers
    the union of its children, or what ``reader`` reads (``semantic+reader``)."""

    def __init__(self, reader: OracleReader | None = None) -> None:
        self.reader = reader

    async def reflect(self, trace, playbook_text=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the ADDs of this harness are given, not reflected")

    aggregate = reflect

    async def reduce(self, partials, context=""):  # type: ignore[no-untyped-def]
        return await (self.reader.reduce if self.reader is not None else _union)([list(p) for p in partials])


def method_for(judge: Judge | None, reader: OracleReader | None = None) -> Method:
    """A round's reduce at the production defaults (``combee_core.method``: fan-in, deterministic merge, caps), with
    ``judge``'s embedder for curation by meaning (None: lexical) and, with ``reader``, as the reducer stage runs with
    a real reducer model (``ReducerConfig.ask_reducer``: pairs the judge is unsure of go to the call)."""
    settings = CombeeSettings.load(env={}, embedding_model="none")
    config = replace(ReducerConfig.from_settings(settings), ask_reducer=reader is not None)
    embedder = judge.cache.embedder if isinstance(judge, SemanticJudge) else None
    return Method(NaiveModel(reader), settings, make_reducer=lambda role: Reducer(config, role, embedder))


async def learn(method: Method, adds: list[AddOp], k: int, batch_id: int,
                reader: OracleReader | None = None) -> Playbook:  # reader: anything with reduce/playbook
    """One batch: ``adds`` spread over ``k`` partials, reduced and applied by the round's reduce
    (``Method.reduce``, the reducer stage's processor)."""
    playbook = method.playbook("bench")
    children = [adds[i::k] for i in range(k)]
    children = [c for c in children if c]
    partials = [_partial(playbook, batch_id, node, len(children), ops) for node, ops in enumerate(children)]
    if reader is not None:
        reader.playbook = playbook
    await method.reduce(partials, None, now=NOW)
    return method.playbook("bench")


def _reader(data: dict, judge: Judge | None, name: str) -> OracleReader | None:
    if not name.endswith("+reader"):
        return None
    labels = {text: lesson["id"] for lesson in data["lessons"] for text in lesson["texts"]}
    corrects = {}
    for i, item in enumerate(data.get("corrections", [])):
        labels[item["rule"]] = f"wrong-{i}"
        labels.setdefault(item["correction"], f"correction-{i}")
        corrects[labels[item["correction"]]] = f"wrong-{i}"
    return OracleReader(labels, corrects)


async def entries_per_lesson(data: dict, judge: Judge | None, batch: int, k: int, seed: int,
                             reader: OracleReader | None = None) -> dict:
    lessons = {text: lesson["id"] for lesson in data["lessons"] for text in lesson["texts"]}
    wordings = list(lessons)
    random.Random(seed).shuffle(wordings)
    # each wording in one of three sections, by its position: rewordings of a lesson land in different sections
    sections = {text: f"section{i % 3}" for i, text in enumerate(lessons)}
    method = method_for(judge, reader)
    playbook = method.playbook("bench")
    for batch_id, start in enumerate(range(0, len(wordings), batch)):
        adds = [AddOp(section=sections[t], content=t) for t in wordings[start:start + batch]]
        playbook = await learn(method, adds, k, batch_id, reader)
    per_lesson: dict[str, int] = {}
    for entry in playbook.entries:  # a real model may reword an ADD: "?" (not one of the set's wordings)
        per_lesson[lessons.get(entry.content, "?")] = per_lesson.get(lessons.get(entry.content, "?"), 0) + 1
    per_lesson_known = {label: n for label, n in per_lesson.items() if label != "?"}
    mixed = sum(1 for e in playbook.entries if e.helpful > 0)
    return {"lessons": len(data["lessons"]), "wordings": len(wordings), "entries": len(playbook),
            "entries_per_lesson": round(len(playbook) / len(data["lessons"]), 2),
            "lessons_kept": len(per_lesson_known), "reinforced_entries": mixed, "per_lesson": per_lesson,
            "reader_calls": reader.calls if reader else 0, "adds_read": reader.adds_read if reader else 0,
            "batches": -(-len(wordings) // batch)}


async def corrections(data: dict, judge: Judge | None, wrong_support: int, correction_support: int,
                      name: str = "", make_reader=None) -> list[dict]:  # type: ignore[no-untyped-def]
    """``make_reader``: the reducer call's reader for each correction (default: by ``name``, as ``_reader``)."""
    out = []
    for i, item in enumerate(data.get("corrections", [])):
        reader = make_reader() if make_reader is not None else _reader(data, judge, name)
        method = method_for(judge, reader)
        playbook = await learn(method, [AddOp(section="rules", content=item["rule"], support=wrong_support)], 1, 0,
                               reader)
        before = playbook.entries[0]
        playbook = await learn(method, [AddOp(section="rules", content=item["correction"],
                                              support=correction_support)], 1, 1, reader)
        after = playbook.get(before.entry_id)
        out.append({"rule": item["rule"], "correction": item["correction"],
                    "wrong_rule_counters_grew": after is not None and after.helpful > before.helpful,
                    "superseded": after is None,
                    "both_kept": after is not None and any(e.content == item["correction"] for e in playbook.entries),
                    "index": i, "entries_after": [e.content for e in playbook.entries]})
    return out


async def main_async(args: argparse.Namespace) -> dict:
    semantic = SemanticJudge(EmbeddingCache(MiniLMEmbedder()))
    judges: dict[str, Judge | None] = {"lexical": None, "static": SemanticJudge(EmbeddingCache(StaticEmbedder())),
                                       "semantic": semantic, "semantic+reader": semantic}
    results: dict = {}
    for set_name in args.sets:
        data = json.loads((DATA / f"{set_name}.json").read_text())
        for name, judge in judges.items():
            results[f"{set_name}/{name}"] = {
                "entries": await entries_per_lesson(data, judge, args.batch, args.k, args.seed,
                                                    _reader(data, judge, name)),
                "corrections": await corrections(data, judge, args.wrong_support, args.correction_support, name),
            }
    return results


def add_batch_args(parser: argparse.ArgumentParser) -> None:
    """The harness's batches and corrections (shared with ``bench.semantic_llm``)."""
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wrong-support", type=int, default=2)
    parser.add_argument("--correction-support", type=int, default=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=["lessons_dev", "lessons_heldout", "lessons_heldout_b",
                                                       "lessons_heldout_c"], help="files of bench/data, no suffix")
    parser.add_argument("--out", default=RESULTS.name, help="results file name under bench/results")
    add_batch_args(parser)
    args = parser.parse_args()
    # versions are built here without batch manifests (no traces), which the reducer warns of once per version
    logging.getLogger("combee_core.reduce.processor").setLevel(logging.ERROR)
    results = asyncio.run(main_async(args))
    print(f"batches of {args.batch} ADDs over k={args.k} partials, seed {args.seed}; corrections: wrong rule support "
          f"{args.wrong_support}, correction support {args.correction_support}")
    print("| set / judge | lessons | wordings | entries | entries per lesson | lessons kept | corrections: wrong "
          "rule reinforced | superseded | both kept | reader: ADDs read per batch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        e, c = r["entries"], r["corrections"]
        print(f"| {name} | {e['lessons']} | {e['wordings']} | {e['entries']} | {e['entries_per_lesson']} | "
              f"{e['lessons_kept']} | {sum(x['wrong_rule_counters_grew'] for x in c)}/{len(c)} | "
              f"{sum(x['superseded'] for x in c)}/{len(c)} | {sum(x['both_kept'] for x in c)}/{len(c)} | "
              + (f"{e['adds_read'] / e['batches']:.1f} ({e['reader_calls']} calls) |" if e["reader_calls"] else "- |"))
    write_results(RESULTS.with_name(args.out), {"args": vars(args), "results": results, "machine": machine()})


if __name__ == "__main__":
    main()
