"""The controller's run vs the best fixed batch size of an exhaustive sweep, on the epoch time a sync fleet waits for.

    python -m bench.controller [--sizes 1,2,3,5,10,20,30,40,60,80,100] [--seeds 0,1,2] [--capacity 12]
                               [--agents 100] [--start N] [--deterministic-merge on|off] [--name controller]
                               [--out bench/results]

For every seed: sequential (batch 3, p = 1, one aggregator call), Combee (p = 2) at every fixed size, and Combee
with the controller (fed one round at a time, as a sync fleet; it fits the round time: rollouts + LLM critical
path). Epoch time (modelled seconds) = sum over versions of the round's rollouts (the rollout model of
docs/simulator.md on ``--agents`` agents) + one reflection latency + the LLM critical path (bench/common.py). The
best fixed size is the fastest whose mean held-out accuracy stays within 1 point of sequential; the figure of merit
is the controller run's epoch time (profiling included) over that size's. The controller starts at ``--start``
(default: the top of its ladder, where it profiles first; GEPA's default 3 shows what a lower start costs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

from bench.common import RunResult, Variant, default_suite, machine, one_pass, run_variant, start_broker, write_results
from combee_core.control.controller import ControllerConfig
from combee_core.settings import CombeeSettings

TAU = CombeeSettings.model_fields["controller_tau"].default
SEQUENTIAL = Variant("sequential (bs 3)", 3, p=1, subgroups="single")


async def run(sizes: list[int], seeds: list[int], capacity: int, agents: int | None, extra: dict,
              start: int | None = None) -> dict:
    suite = default_suite()
    broker = start_broker()
    runs: list[RunResult] = []
    try:
        for seed in seeds:
            traces = one_pass(suite, seed)
            variants = [SEQUENTIAL] + [Variant(f"fixed {size}", size, p=2) for size in sizes]
            first = start if start is not None else ControllerConfig(fleet_agents=agents).ladder[0]
            variants.append(Variant("controller", first, p=2, auto=True))
            for variant in variants:
                result = await run_variant(broker, variant, suite, traces, capacity=capacity, seed=seed,
                                           agents=agents, extra=extra)
                runs.append(result)
                print(f"  seed {seed} {variant.name:<18} epoch {result.epoch_time_s:8.1f}s  acc "
                      f"{result.held_out_accuracy:.3f}  versions {result.versions:3d}"
                      + (f"  decisions {result.decisions}" if result.decisions else ""), file=sys.stderr, flush=True)
    finally:
        broker.stop()
    return summarise(runs, sizes, seeds, capacity, agents, extra) | {
        "controller_start": start if start is not None else ControllerConfig(fleet_agents=agents).ladder[0]}


def _mean(runs: list[RunResult], name: str, field: str) -> float:
    return statistics.fmean(getattr(r, field) for r in runs if r.variant == name)


def summarise(runs: list[RunResult], sizes: list[int], seeds: list[int], capacity: int, agents: int | None,
              extra: dict) -> dict:
    seq_acc = _mean(runs, SEQUENTIAL.name, "held_out_accuracy")
    seq_epoch = _mean(runs, SEQUENTIAL.name, "epoch_time_s")
    sweep = []
    for size in sizes:
        name = f"fixed {size}"
        sweep.append(dict(batch_size=size, epoch_time_s=_mean(runs, name, "epoch_time_s"),
                          pipeline_s=_mean(runs, name, "epoch_delay_s"),
                          accuracy=_mean(runs, name, "held_out_accuracy"),
                          versions=_mean(runs, name, "versions")))
    for row in sweep:
        row["speedup_vs_sequential"] = seq_epoch / row["epoch_time_s"]
        row["within_1_point"] = row["accuracy"] >= seq_acc - 0.01
    eligible = [row for row in sweep if row["within_1_point"]]
    best = min(eligible, key=lambda row: row["epoch_time_s"]) if eligible else None
    controlled = [r for r in runs if r.variant == "controller"]
    c_epoch = statistics.fmean(r.epoch_time_s for r in controlled)
    c_acc = statistics.fmean(r.held_out_accuracy for r in controlled)
    return dict(
        machine=machine(), seeds=seeds, capacity=capacity, agents=agents, settings=extra, tau=TAU,
        ladder=list(ControllerConfig(fleet_agents=agents).ladder), bs_max=ControllerConfig().bs_max,
        sequential=dict(epoch_time_s=seq_epoch, accuracy=seq_acc), sweep=sweep, best=best,
        controller=dict(epoch_time_s=c_epoch, accuracy=c_acc, speedup_vs_sequential=seq_epoch / c_epoch,
                        per_seed=[dict(seed=r.seed, decisions=r.decisions, reasons=r.decision_reasons,
                                       batch_sizes=r.batch_sizes, rounds=r.rounds,
                                       epoch_time_s=r.epoch_time_s, accuracy=r.held_out_accuracy) for r in controlled]),
        epoch_time_ratio_vs_best=(c_epoch / best["epoch_time_s"]) if best else None,
        runs=[r.model_dump() for r in runs],
    )


def report(result: dict) -> str:
    lines = [f"C = {result['capacity']}, seeds {result['seeds']}, {result['agents'] or 'one per task'} agents; "
             f"sequential: epoch {result['sequential']['epoch_time_s']:.1f}s, "
             f"acc {result['sequential']['accuracy']:.3f}",
             f"{'bs':>5} {'epoch time s':>13} {'speedup':>8} {'pipeline s':>11} {'versions':>8} {'acc':>6}"]
    for row in result["sweep"]:
        mark = "  <- best within 1 point of sequential" if row == result["best"] else ""
        mark = mark or ("" if row["within_1_point"] else "  (loses > 1 point)")
        lines.append(f"{row['batch_size']:>5} {row['epoch_time_s']:>13.1f} {row['speedup_vs_sequential']:>7.2f}x "
                     f"{row['pipeline_s']:>11.1f} {row['versions']:>8.1f} {row['accuracy']:>6.3f}{mark}")
    c = result["controller"]
    lines += ["", f"controller (starts at {result.get('controller_start')}, ladder {result['ladder']} profiled from "
                  f"the top, upper bound {result['bs_max']}, tau {result['tau']}):"]
    for seed in c["per_seed"]:
        lines.append(f"  seed {seed['seed']}: decisions {seed['decisions']}; rounds {seed.get('rounds')}; versions' "
                     f"batches {seed['batch_sizes']}; epoch "
                     f"{seed['epoch_time_s']:.1f}s; acc {seed['accuracy']:.3f}")
    best = result["best"]
    lines.append(f"controller epoch {c['epoch_time_s']:.1f}s ({c['speedup_vs_sequential']:.2f}x sequential), acc "
                 f"{c['accuracy']:.3f}")
    if best:
        lines.append(f"best fixed: bs {best['batch_size']}, epoch {best['epoch_time_s']:.1f}s "
                     f"({best['speedup_vs_sequential']:.2f}x), acc {best['accuracy']:.3f}; controller / best = "
                     f"{result['epoch_time_ratio_vs_best']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,3,5,10,20,30,40,60,80,100")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--capacity", type=int, default=12)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--start", type=int, help="the controller's first batch size (default: its ladder's top)")
    parser.add_argument("--deterministic-merge", choices=["on", "off"], default="on")
    parser.add_argument("--name", default="controller", help="results file name (default controller)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    extra = {"deterministic_merge": args.deterministic_merge == "on"}
    result = asyncio.run(run([int(s) for s in args.sizes.split(",")], [int(s) for s in args.seeds.split(",")],
                             args.capacity, args.agents, extra, args.start))
    print(report(result))
    write_results(args.out / f"{args.name}.json", result)
    print(f"\nwrote {args.out / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
