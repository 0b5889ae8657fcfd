"""A real local model (SmolLM2-135M-Instruct, llama.cpp, extra [local-llm]) through the whole topology on a real
broker, with context on and a small playbook budget: does every version stay within it, and what does the model do?

    python -m bench.real_model_budget        # ~10-15 min on 2 loaded cores; writes bench/results/real_model_budget.json

48 traces of the synthetic suite (all run with the empty playbook), batches of 3 (k = 1: the aggregator's answer
is the version's operations; ``max_wait_s`` 60 s so that slow reflections still fill a batch), an 80-token playbook
budget and the same context budget. The model answers under the server's schema-constrained decoding
(``llama_cpp_schema``, all five operations), at most 128 tokens per answer. A 135M model writes poor lessons: the
point is the invariants (every version within budget, evictions recorded, every trace accounted for), not the
quality of the lessons. ``--batch 8 --budget 150 --max-wait-s 120`` adds a reducer call per version (k = 2).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path

from bench.common import machine, start_broker, write_results
from combee_core.llm.prompts import read_data_block
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from streams.local_model.model_server import LocalModelServer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces

RESULTS = Path(__file__).parent / "results" / "real_model_budget.json"


async def run(args: argparse.Namespace, server: LocalModelServer, bootstrap: str, profile) -> dict:
    settings = CombeeSettings.load(
        env={}, topic_prefix=f"bench-real-{uuid.uuid4().hex[:8]}.", partitions=2, batch_size=args.batch, p=2,
        max_wait_s=args.max_wait_s, llm_max_tokens=args.max_tokens, llm_max_retries=1, llm_timeout_s=300.0,
        llm_concurrency=1,
        playbook_budget_tokens=args.budget, llm_context_tokens=args.budget, **server.settings_overrides(),
    )
    traces = train_traces(build_suite(seed=7), args.traces, playbook_ids=("real",), run_seed=21)
    trace_ids = {t.trace_id for t in traces}
    started = time.monotonic()
    async with InProcessPipeline(settings, bootstrap, profile) as run:
        await produce_traces(settings, bootstrap, profile, traces)
        deadline = time.monotonic() + args.deadline_s
        while True:
            run.check_alive()
            versions, dead = await run.versions("real"), await run.dead_letters()
            seen = {t for v in versions for t in v.lineage} | {d.trace_id for d in dead}
            if trace_ids <= seen or time.monotonic() > deadline:
                break
            await asyncio.sleep(2.0)
    elapsed = time.monotonic() - started
    with_context = 0
    for call in run.calls:
        if call.role in ("aggregator", "reducer") and call.error is None:
            with_context += bool(read_data_block(call.messages).get("playbook"))
    rows = []
    for v in versions:
        reasons = Counter(a.reason.split(":")[0] if a.outcome == "rejected" or a.reason.startswith("evicted")
                          else a.outcome for a in v.operations)
        rows.append({"version": v.version, "traces": len(v.lineage), "entries": len(v.entries),
                     "playbook_tokens": v.stats.playbook_tokens, "operations": dict(reasons)})
    return {
        "traces": len(traces), "accounted_for": len(trace_ids & ({t for v in versions for t in v.lineage}
                                                                  | {d.trace_id for d in dead})),
        "in_lineage": len(trace_ids & {t for v in versions for t in v.lineage}),
        "dead_letters": dict(Counter(d.stage for d in dead)), "versions": rows,
        "all_within_budget": all(r["playbook_tokens"] <= args.budget for r in rows),
        "evictions": sum(r["operations"].get("evicted", 0) for r in rows),
        "calls": dict(Counter(c.role for c in run.calls)), "failed_calls": sum(c.error is not None for c in run.calls),
        "aggregator_reducer_calls_with_playbook_in_prompt": with_context,
        "final_entries": [e.content for e in versions[-1].entries] if versions else [],
        "operation_answers": [{"role": c.role, "attempt": c.attempt, "error": c.error,
                               "text": (c.response_text or "")[:400]}
                              for c in run.calls if c.role in ("aggregator", "reducer")][:12],
        "elapsed_s": round(elapsed, 1), "budget_tokens": args.budget,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=48)
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--budget", type=int, default=80)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-wait-s", type=float, default=60.0,
                        help="close a batch after this long (reflections take ~10 s each: keep batches full)")
    parser.add_argument("--deadline-s", type=float, default=2400.0)
    args = parser.parse_args()
    broker = start_broker()
    try:
        with LocalModelServer(n_ctx=4096, n_threads=1) as server:
            result = asyncio.run(run(args, server, broker.bootstrap, broker.profile))
    finally:
        broker.stop()
    print(f"{result['in_lineage']}/{result['traces']} traces in a version's lineage, dead letters "
          f"{result['dead_letters']}, {len(result['versions'])} versions, every one within {args.budget} tokens: "
          f"{result['all_within_budget']}, {result['evictions']} evictions; calls {result['calls']} "
          f"({result['failed_calls']} failed attempts); {result['aggregator_reducer_calls_with_playbook_in_prompt']} "
          f"aggregator/reducer calls carried the playbook; {result['elapsed_s']:.0f} s")
    print("| version | traces | entries | playbook tokens | operations |")
    print("|---|---|---|---|---|")
    for row in result["versions"]:
        print(f"| {row['version']} | {row['traces']} | {row['entries']} | {row['playbook_tokens']} | "
              f"{row['operations']} |")
    write_results(RESULTS, result | {"machine": machine()})


if __name__ == "__main__":
    main()
