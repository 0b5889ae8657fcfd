"""Quality vs delay: sequential, naive large batch, Combee and Combee + controller, through the same topology.

    python -m bench.quality_delay [--capacities 12,6,24] [--seeds 0,1,2] [--agents 100] [--rollout-calls 10]
                                  [--out bench/results]

Prints one table per simulator capacity C (mean ± spread over seeds) and writes ``quality_delay.json`` and
``quality_delay.png`` (the quality-delay plane) into ``--out``. Speedups are against sequential batch 3 on the
epoch time the paper measures (rollouts of every round included: the rollout model of docs/simulator.md, a sync
fleet of ``--agents`` agents), next to the pipeline-only epoch delay (LLM latencies only). Simulated figures: see
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

from bench.common import (
    RunResult,
    Variant,
    default_suite,
    machine,
    mean_spread,
    one_pass,
    run_variant,
    start_broker,
    write_results,
)
from combee_core.control.controller import ControllerConfig
from combee_core.settings import CombeeSettings

VARIANTS = (
    Variant("sequential (bs 3)", 3, p=1, subgroups="single"),
    Variant("naive bs 30", 30, p=1, subgroups="single"),
    Variant("naive bs 40", 40, p=1, subgroups="single"),
    Variant("naive bs 100", 100, p=1, subgroups="single"),
    Variant("combee bs 30, p 2", 30, p=2),
    Variant("combee bs 40, p 2", 40, p=2),
    Variant("combee bs 100, p 2", 100, p=2),
    # starts at the top of its ladder (the upper bound), where it profiles first: the first round is a sample
    Variant("combee + controller", ControllerConfig().ladder[0], p=2, auto=True),
)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def run_all(capacities: list[int], seeds: list[int], variants=VARIANTS, *, agents: int | None = 100,
                  extra: dict | None = None) -> list[RunResult]:
    suite = default_suite()
    broker = start_broker()
    results = []
    try:
        for capacity in capacities:
            for seed in seeds:
                traces = one_pass(suite, seed)
                for variant in variants:
                    result = await run_variant(broker, variant, suite, traces, capacity=capacity, seed=seed,
                                               agents=agents, extra=extra)
                    print(f"  C={capacity} seed={seed} {variant.name:<22} acc {result.held_out_accuracy:.3f} "
                          f"epoch {result.epoch_time_s:8.1f}s (pipeline {result.epoch_delay_s:7.1f}s)  "
                          f"versions {result.versions:3d}  ({result.wall_s:.0f}s wall)", file=sys.stderr, flush=True)
                    results.append(result)
    finally:
        broker.stop()
    return results


def table(results: list[RunResult]) -> tuple[str, list[dict]]:
    """The printed table and its rows (means and spreads per capacity and variant)."""
    groups: dict[tuple[int, str], list[RunResult]] = defaultdict(list)
    for r in results:
        groups[(r.capacity, r.variant)].append(r)
    rows = []
    for (capacity, name), runs in groups.items():
        acc, acc_sd = mean_spread([r.held_out_accuracy for r in runs])
        delay, delay_sd = mean_spread([r.epoch_delay_s for r in runs])
        epoch, epoch_sd = mean_spread([r.epoch_time_s for r in runs])
        sequential = groups.get((capacity, VARIANTS[0].name))
        seq_delay = mean_spread([r.epoch_delay_s for r in sequential])[0] if sequential else None
        seq_epoch = mean_spread([r.epoch_time_s for r in sequential])[0] if sequential else None
        seq_acc = mean_spread([r.held_out_accuracy for r in sequential])[0] if sequential else None
        gained = (acc - runs[0].accuracy_before) * 100
        cost = mean_spread([r.cost_usd for r in runs])[0]
        rows.append(dict(
            capacity=capacity, variant=name, seeds=len(runs), accuracy=acc, accuracy_sd=acc_sd,
            entries=mean_spread([r.playbook_entries for r in runs])[0],
            playbook_tokens=mean_spread([r.playbook_tokens for r in runs])[0],
            epoch_delay_s=delay, epoch_delay_sd=delay_sd,
            speedup_vs_sequential=(seq_delay / delay) if seq_delay and delay else None,
            epoch_time_s=epoch, epoch_time_sd=epoch_sd,
            epoch_speedup_vs_sequential=(seq_epoch / epoch) if seq_epoch and epoch else None,
            accuracy_vs_sequential_points=((acc - seq_acc) * 100) if seq_acc is not None else None,
            versions=mean_spread([r.versions for r in runs])[0],
            reducer_calls=mean_spread([r.reducer_calls for r in runs])[0],
            merged_without_call=mean_spread([r.merged_without_call for r in runs])[0],
            controller_decisions=[r.decisions for r in runs if r.decisions],
            per_seed_epoch_speedup=([round(s.epoch_time_s / r.epoch_time_s, 2) for s, r in
                                     zip(sorted(sequential, key=lambda x: x.seed), sorted(runs, key=lambda x: x.seed))]
                                    if sequential and all(r.epoch_time_s for r in runs) else None),
            llm_calls=mean_spread([r.llm_calls for r in runs])[0],
            tokens=mean_spread([r.prompt_tokens + r.completion_tokens for r in runs])[0],
            cost_usd=cost, cost_per_point=(cost / gained) if gained > 0 else None,
            batch_sizes=sorted({b for r in runs for b in r.batch_sizes}),
        ))
    lines = []
    header = (f"{'C':>3} {'variant':<22} {'held-out acc':>14} {'vers':>5} {'epoch time s':>16} {'speedup':>8} "
              f"{'pipeline s':>14} {'speedup':>8} {'entries':>7} {'calls':>6} {'reduce':>6} {'merged':>6} "
              f"{'cost $':>8}")
    lines.append(header)
    lines.append("-" * len(header))
    for row in rows:
        speed = f"{row['speedup_vs_sequential']:.2f}x" if row["speedup_vs_sequential"] else "-"
        epoch_speed = (f"{row['epoch_speedup_vs_sequential']:.2f}x" if row.get("epoch_speedup_vs_sequential")
                       else "-")
        lines.append(
            f"{row['capacity']:>3} {row['variant']:<22} {row['accuracy']:.3f} ± {row['accuracy_sd']:.3f} "
            f"{row.get('versions', 0):>5.1f} {row.get('epoch_time_s', 0):>7.1f} ± {row.get('epoch_time_sd', 0):>6.1f} "
            f"{epoch_speed:>8} {row['epoch_delay_s']:>6.1f} ± {row['epoch_delay_sd']:>5.1f} {speed:>8} "
            f"{row['entries']:>7.1f} {row['llm_calls']:>6.0f} {row.get('reducer_calls', 0):>6.1f} "
            f"{row.get('merged_without_call', 0):>6.1f} {row['cost_usd']:>8.4f}")
    return "\n".join(lines), rows


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    capacities = sorted({r["capacity"] for r in rows})
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(capacities), figsize=(5.2 * len(capacities), 4.4), dpi=110, squeeze=False,
                             sharex=True, sharey=True)
    markers = dict(zip([v.name for v in VARIANTS], "osDpv^h*"))
    for ax, capacity in zip(axes[0], capacities):
        for row in (r for r in rows if r["capacity"] == capacity):
            ax.errorbar(row["epoch_time_s"], row["accuracy"], xerr=row["epoch_time_sd"], yerr=row["accuracy_sd"],
                        marker=markers.get(row["variant"], "o"), markersize=7, capsize=3, linestyle="none",
                        label=row["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("epoch time incl. rollouts, modelled seconds (log)")
        ax.set_ylabel("held-out accuracy (final playbook)")
        ax.set_title(f"simulator capacity C = {capacity}")
        ax.set_ylim(0.3, 1.0)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Quality-delay plane (simulated; up and left is better)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacities", default="12,6,24", help="simulator capacities C (default 12,6,24)")
    parser.add_argument("--seeds", default="0,1,2", help="run seeds (default 0,1,2)")
    parser.add_argument("--agents", type=int, default=100,
                        help="parallel agents of the sync fleet (default 100: one per trace of the largest batch)")
    parser.add_argument("--rollout-calls", type=int, help="agent LLM calls per task (default: the settings', 10)")
    parser.add_argument("--deterministic-merge", choices=["on", "off"], default="on",
                        help="merge non-conflicting partials without the reducer call (default on, the setting's "
                             "default); off: every reduce is a call")
    parser.add_argument("--name", default="quality_delay", help="results file name (default quality_delay)")
    parser.add_argument("--only", help="run only the variants whose name contains this text (plus sequential, the "
                                       "reference of the speedups)")
    parser.add_argument("--set", action="append", default=[], metavar="SETTING=VALUE",
                        help="any other CombeeSettings field for every run (repeatable), e.g. to compare a pipeline "
                             "option on and off")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--from-json", type=Path, help="re-print and re-plot a previous quality_delay.json, no runs")
    args = parser.parse_args(argv)
    if args.from_json:
        import json

        results = [RunResult.model_validate(r) for r in json.loads(args.from_json.read_text())["runs"]]
    else:
        extra = {"deterministic_merge": args.deterministic_merge == "on"}
        if args.rollout_calls is not None:
            extra["rollout_calls_per_task"] = args.rollout_calls
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep or key not in CombeeSettings.model_fields:
                parser.error(f"--set {item!r}: expected SETTING=VALUE with a CombeeSettings field")
            extra[key] = value  # validated (and converted) by CombeeSettings.load
        variants = [v for v in VARIANTS if v is VARIANTS[0] or not args.only or args.only in v.name]
        results = asyncio.run(run_all(_ints(args.capacities), _ints(args.seeds), variants, agents=args.agents,
                                      extra=extra))
    text, rows = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.from_json.stem if args.from_json else args.name
    png = plot(rows, args.out / f"{name}.png")
    if not args.from_json:
        write_results(args.out / f"{name}.json", {"machine": machine(), "rows": rows, "argv": sys.argv[1:],
                                                   "runs": [r.model_dump() for r in results]})
    print(f"\nwrote {args.out / (name + '.json')} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
