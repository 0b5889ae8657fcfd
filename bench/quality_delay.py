"""Quality vs delay: sequential, naive large batch, Combee and Combee + controller, through the same topology.

    python -m bench.quality_delay [--capacities 12,6,24] [--seeds 0,1,2] [--out bench/results]

Prints one table per simulator capacity C (mean ± spread over seeds) and writes ``quality_delay.json`` and
``quality_delay.png`` (the quality-delay plane) into ``--out``. Simulated figures: see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

from bench.common import (RunResult, Variant, default_suite, machine, mean_spread, run_variant, start_broker,
                          one_pass, write_results)

VARIANTS = (
    Variant("sequential (bs 3)", 3, p=1, subgroups="single"),
    Variant("naive bs 40", 40, p=1, subgroups="single"),
    Variant("naive bs 100", 100, p=1, subgroups="single"),
    Variant("combee bs 40, p 2", 40, p=2),
    Variant("combee bs 100, p 2", 100, p=2),
    Variant("combee + controller", 40, p=2, auto=True),
)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def run_all(capacities: list[int], seeds: list[int], variants=VARIANTS) -> list[RunResult]:
    suite = default_suite()
    broker = start_broker()
    results = []
    try:
        for capacity in capacities:
            for seed in seeds:
                traces = one_pass(suite, seed)
                for variant in variants:
                    result = await run_variant(broker, variant, suite, traces, capacity=capacity, seed=seed)
                    print(f"  C={capacity} seed={seed} {variant.name:<22} acc {result.held_out_accuracy:.3f} "
                          f"delay {result.epoch_delay_s:8.1f}s  versions {result.versions:3d}  "
                          f"({result.wall_s:.0f}s wall)", file=sys.stderr, flush=True)
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
        sequential = groups.get((capacity, VARIANTS[0].name))
        seq_delay = mean_spread([r.epoch_delay_s for r in sequential])[0] if sequential else None
        gained = (acc - runs[0].accuracy_before) * 100
        cost = mean_spread([r.cost_usd for r in runs])[0]
        rows.append(dict(
            capacity=capacity, variant=name, seeds=len(runs), accuracy=acc, accuracy_sd=acc_sd,
            entries=mean_spread([r.playbook_entries for r in runs])[0],
            playbook_tokens=mean_spread([r.playbook_tokens for r in runs])[0],
            epoch_delay_s=delay, epoch_delay_sd=delay_sd,
            speedup_vs_sequential=(seq_delay / delay) if seq_delay and delay else None,
            llm_calls=mean_spread([r.llm_calls for r in runs])[0],
            tokens=mean_spread([r.prompt_tokens + r.completion_tokens for r in runs])[0],
            cost_usd=cost, cost_per_point=(cost / gained) if gained > 0 else None,
            batch_sizes=sorted({b for r in runs for b in r.batch_sizes}),
        ))
    lines = []
    header = (f"{'C':>3} {'variant':<22} {'held-out acc':>14} {'entries':>7} {'pb tok':>6} {'epoch delay s':>16} "
              f"{'speedup':>7} {'calls':>6} {'tokens':>8} {'cost $':>8} {'$/point':>8}")
    lines.append(header)
    lines.append("-" * len(header))
    for row in rows:
        speed = f"{row['speedup_vs_sequential']:.2f}x" if row["speedup_vs_sequential"] else "-"
        per_point = f"{row['cost_per_point']:.5f}" if row["cost_per_point"] else "-"
        lines.append(
            f"{row['capacity']:>3} {row['variant']:<22} {row['accuracy']:.3f} ± {row['accuracy_sd']:.3f} "
            f"{row['entries']:>7.1f} {row['playbook_tokens']:>6.0f} {row['epoch_delay_s']:>8.1f} ± "
            f"{row['epoch_delay_sd']:>5.1f} {speed:>7} {row['llm_calls']:>6.0f} {row['tokens']:>8.0f} "
            f"{row['cost_usd']:>8.4f} {per_point:>8}")
    return "\n".join(lines), rows


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    capacities = sorted({r["capacity"] for r in rows})
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(capacities), figsize=(5.2 * len(capacities), 4.4), dpi=110, squeeze=False,
                             sharex=True, sharey=True)
    markers = dict(zip([v.name for v in VARIANTS], "osD^v*"))
    for ax, capacity in zip(axes[0], capacities):
        for row in (r for r in rows if r["capacity"] == capacity):
            ax.errorbar(row["epoch_delay_s"], row["accuracy"], xerr=row["epoch_delay_sd"], yerr=row["accuracy_sd"],
                        marker=markers.get(row["variant"], "o"), markersize=7, capsize=3, linestyle="none",
                        label=row["variant"])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("epoch delay, modelled seconds (log)")
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
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--from-json", type=Path, help="re-print and re-plot a previous quality_delay.json, no runs")
    args = parser.parse_args(argv)
    if args.from_json:
        import json

        results = [RunResult.model_validate(r) for r in json.loads(args.from_json.read_text())["runs"]]
    else:
        results = asyncio.run(run_all(_ints(args.capacities), _ints(args.seeds)))
    text, rows = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot(rows, args.out / "quality_delay.png")
    if not args.from_json:
        write_results(args.out / "quality_delay.json", {"machine": machine(), "rows": rows,
                                                         "runs": [r.model_dump() for r in results]})
    print(f"\nwrote {args.out / 'quality_delay.json'} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
