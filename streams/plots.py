"""PNG plots of a run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from streams.demo import ControllerSummary, VersionRow


def plot_accuracy(rows: Sequence[VersionRow], baseline: float, path: Path) -> Path:
    """Held-out accuracy of every playbook version, with the empty playbook's accuracy as version 0."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    xs = [0] + [r.version for r in rows]
    ys = [baseline] + [r.held_out_accuracy for r in rows]
    ax.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.6, color="#1f77b4", label="held-out accuracy")
    ax.axhline(baseline, linestyle="--", color="grey", linewidth=1, label=f"empty playbook ({baseline:.3f})")
    ax.set_xlabel("playbook version")
    ax.set_ylabel("held-out accuracy (expected, noise-free)")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    final = ys[-1]
    ax.set_title(f"Held-out accuracy per version: {baseline:.3f} -> {final:.3f}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_controller(summary: ControllerSummary, path: Path) -> Path:
    """The controller's delay samples (per trace, vs batch size, log-log), its power-law fit and its choices."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    unit = "LLM critical path" if summary.clock == "modelled" else "wall delay, batch closed to version"
    if summary.samples:
        ax.scatter([s.batch_size for s in summary.samples], [max(s.per_trace_delay_s, 1e-9) for s in summary.samples],
                   s=18, color="#1f77b4", alpha=0.8, label=f"samples ({len(summary.samples)} batches)", zorder=3)
    sizes = [s.batch_size for s in summary.samples]
    if summary.fit_A is not None and summary.fit_alpha is not None and sizes:
        lo, hi = max(1, min(sizes) * 0.8), max(sizes) * 1.25
        grid = [lo * (hi / lo) ** (i / 99) for i in range(100)]
        ax.plot(grid, [summary.fit_A * g ** (-summary.fit_alpha) for g in grid], color="#d62728", linewidth=1.6,
                label=f"fit T(bs) = {summary.fit_A:.3g}·bs^-{summary.fit_alpha:.2f}  (r² = {summary.fit_r2:.2f})")
    if summary.chosen_batch_sizes:
        last = summary.chosen_batch_sizes[-1]
        ax.axvline(last, color="#2ca02c", linestyle="--", linewidth=1.2, label=f"controller's last choice: {last}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (traces per version)")
    ax.set_ylabel(f"per-trace delay, s ({unit})")
    title = "Controller: delay per trace vs batch size"
    if not summary.auto:
        title += " (fixed batch size: no retuning)"
    if summary.fit_A is None:
        ax.text(0.5, 0.5, "fewer than 2 distinct batch sizes: no fit", transform=ax.transAxes, ha="center",
                color="grey")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
