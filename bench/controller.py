"""The controller's batch size vs the best of an exhaustive sweep under the same latency model.

    python -m bench.controller [--sizes 1,2,3,5,8,10,13,20,30,40,60,80] [--seed 0] [--out bench/results]

The sweep runs Combee (p = 2) at every fixed size over the same train traces and measures the per-trace delay
T(bs) = mean over full batches of (LLM critical path / bs), in modelled seconds: exactly what the controller
measures. The controller chooses bs* = (alpha / tau)^(1/(alpha+1)) on T normalised at bs = 1, which is the
minimiser of J(bs) = T(bs)/T(1) + tau * bs. So the sweep's best is the swept size with the smallest measured J.
Then one run with the controller on (starting at 40, profiling, then fitted) is compared with it: the size it
settled on, and the ratio of epoch delays (controller run / best swept size run), with held-out accuracy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

from bench.common import (RunResult, Variant, default_suite, feed_in_rounds, machine, start_broker, one_pass,
                          write_results)
from combee_core.controller import ControllerConfig
from combee_core.models import BatchMetrics
from combee_core.settings import CombeeSettings
from streams.pipeline import InProcessPipeline, read_models
from streams.produce import produce_traces

TAU = CombeeSettings.model_fields["controller_tau"].default


async def _run(broker, variant: Variant, suite, traces, seed: int) -> tuple[RunResult, list[BatchMetrics]]:
    """Like bench.common.run_variant, also returning the batch metrics."""
    import time
    import uuid

    from bench.common import summarise

    settings = CombeeSettings.load(env={}, topic_prefix=f"benchc{uuid.uuid4().hex[:8]}.", run_seed=seed,
                                   sim_clock="virtual", controller_clock="modelled", max_wait_s=1.0, partitions=2,
                                   **variant.overrides())
    started = time.monotonic()
    async with InProcessPipeline(settings, broker.bootstrap, broker.profile) as run:
        if variant.auto:  # a burst would be batched at the start size before the first decision
            await feed_in_rounds(run, traces, timeout_s=900)
        else:
            await produce_traces(settings, broker.bootstrap, broker.profile, traces)
        versions = await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=900)
        metrics = await read_models(run, "metrics", BatchMetrics)
        decisions = await run.decisions()
        calls = list(run.calls)
    result = summarise(variant, suite, traces, versions, metrics, calls, capacity=settings.sim_capacity, seed=seed,
                       wall_s=time.monotonic() - started)
    return result, metrics, [d.batch_size for d in decisions]


def per_trace_delay(metrics: list[BatchMetrics], size: int) -> float:
    """Mean per-trace delay over the full batches of a fixed-size run."""
    full = [m.llm_critical_path_s / m.batch_size for m in metrics if m.batch_size == size]
    return statistics.fmean(full)


async def run(sizes: list[int], seed: int) -> dict:
    suite = default_suite()
    traces = one_pass(suite, seed)
    broker = start_broker()
    sweep = []
    try:
        for size in sizes:
            result, metrics, _ = await _run(broker, Variant(f"fixed {size}", size, p=2), suite, traces, seed)
            sweep.append(dict(batch_size=size, per_trace_delay_s=per_trace_delay(metrics, size),
                              epoch_delay_s=result.epoch_delay_s, accuracy=result.held_out_accuracy,
                              versions=result.versions))
            print(f"  fixed {size:>4}: T {sweep[-1]['per_trace_delay_s']:.4f}s/trace  epoch delay "
                  f"{result.epoch_delay_s:8.1f}s  acc {result.held_out_accuracy:.3f}", file=sys.stderr, flush=True)
        controlled, _, decided = await _run(broker, Variant("controller", 40, p=2, auto=True), suite, traces, seed)
    finally:
        broker.stop()
    t1 = next((row["per_trace_delay_s"] for row in sweep if row["batch_size"] == 1), sweep[0]["per_trace_delay_s"])
    reference = next((row["batch_size"] for row in sweep if row["batch_size"] == 1), sweep[0]["batch_size"])
    for row in sweep:
        row["objective"] = row["per_trace_delay_s"] / t1 + TAU * row["batch_size"]
    best = min(sweep, key=lambda row: row["objective"])
    # The controller profiles and fits over its ladder's range only; the best swept size within that range too.
    ladder = ControllerConfig().ladder
    in_range = [row for row in sweep if min(ladder) <= row["batch_size"] <= max(ladder)]
    best_in_range = min(in_range, key=lambda row: row["objective"]) if in_range else best
    settled = decided[-1] if decided else None
    return dict(machine=machine(), seed=seed, tau=TAU, reference_batch_size=reference, sweep=sweep, best=best,
                best_in_ladder_range=best_in_range, ladder=list(ladder),
                controller=dict(batch_sizes=controlled.batch_sizes, decisions=decided, settled_on=settled,
                                epoch_delay_s=controlled.epoch_delay_s, accuracy=controlled.held_out_accuracy,
                                versions=controlled.versions),
                epoch_delay_ratio=controlled.epoch_delay_s / best["epoch_delay_s"],
                epoch_delay_ratio_in_range=controlled.epoch_delay_s / best_in_range["epoch_delay_s"])


def report(result: dict) -> str:
    lines = [f"{'bs':>5} {'T(bs) s/trace':>14} {'J = T/T(1) + tau*bs':>20} {'epoch delay s':>14} {'acc':>6}"]
    for row in result["sweep"]:
        mark = "  <- sweep best" if row == result["best"] else ""
        if row == result["best_in_ladder_range"] and row != result["best"]:
            mark = f"  <- sweep best within the controller's ladder range {result['ladder']}"
        lines.append(f"{row['batch_size']:>5} {row['per_trace_delay_s']:>14.4f} {row['objective']:>20.4f} "
                     f"{row['epoch_delay_s']:>14.1f} {row['accuracy']:>6.3f}{mark}")
    c = result["controller"]
    lines += [
        "",
        f"controller: decisions {c['decisions']}; batch sizes used {c['batch_sizes']}",
        f"controller settled on bs = {c['settled_on']}; sweep best bs = {result['best']['batch_size']} "
        f"(within the ladder range: {result['best_in_ladder_range']['batch_size']})",
        f"epoch delay: controller run {c['epoch_delay_s']:.1f}s (incl. profiling) vs sweep best "
        f"{result['best']['epoch_delay_s']:.1f}s -> ratio {result['epoch_delay_ratio']:.2f}; vs the best within "
        f"the range {result['best_in_ladder_range']['epoch_delay_s']:.1f}s -> ratio "
        f"{result['epoch_delay_ratio_in_range']:.2f}",
        f"held-out accuracy: controller run {c['accuracy']:.3f}, sweep best {result['best']['accuracy']:.3f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,3,5,8,10,13,20,30,40,60,80")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    result = asyncio.run(run([int(s) for s in args.sizes.split(",")], args.seed))
    print(report(result))
    write_results(args.out / "controller.json", result)
    print(f"\nwrote {args.out / 'controller.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
