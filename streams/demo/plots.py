"""PNG plots of a run (matplotlib, Agg backend: no display needed). matplotlib is imported when a figure is drawn
(about 1 s of CPU): the text helpers here (:func:`controller_plot_skipped`, the tick choices) do not need it."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from streams.demo.results import ControllerSummary, VersionRow


def _pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (no display needed), imported on the first figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(rows: Sequence[VersionRow], baseline: float, path: Path) -> Path:
    """Held-out accuracy of every playbook version, with the empty playbook's accuracy as version 0."""
    fig = accuracy_figure(rows, baseline)
    fig.savefig(path, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def accuracy_figure(rows: Sequence[VersionRow], baseline: float):
    """The figure :func:`plot_accuracy` saves. Its legend sits below the axes, so that it never covers a point (a
    rejected version's marker is the one the misleading demo exists to show, wherever it falls)."""
    fig, ax = _pyplot().subplots(figsize=(7, 4.6), dpi=120)
    xs = [0] + [r.version for r in rows]
    ys = [baseline] + [r.held_out_accuracy for r in rows]
    ax.plot(xs, ys, marker="o", markersize=3.5, linewidth=1.6, color="#1f77b4", label="held-out accuracy")
    ax.axhline(baseline, linestyle="--", color="grey", linewidth=1, label=f"empty playbook ({baseline:.3f})")
    promoted = [r for r in rows if r.decision == "promote"]
    refused = [r for r in rows if r.decision in ("reject", "hold")]
    if promoted:
        ax.scatter([r.version for r in promoted], [r.held_out_accuracy for r in promoted], s=36, marker="o",
                   facecolors="none", edgecolors="#2ca02c", linewidths=1.4, zorder=3, label="promoted")
    if refused:
        ax.scatter([r.version for r in refused], [r.held_out_accuracy for r in refused], s=40, marker="x",
                   color="#d62728", zorder=3, label="not promoted (rejected / held)")
    if promoted or refused:  # what the agents ran: the last promoted version's accuracy
        served, current = [baseline], baseline
        for row in rows:
            current = row.held_out_accuracy if row.decision == "promote" else current
            served.append(current)
        ax.step(xs, served, where="post", color="#2ca02c", linewidth=1.2, alpha=0.8, label="served to agents")
    ax.set_xlabel("playbook version")
    ax.set_ylabel("held-out accuracy (expected, noise-free)")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    final = ys[-1]
    ax.set_title(f"Held-out accuracy per version: {baseline:.3f} -> {final:.3f}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def controller_plot_skipped(summary: ControllerSummary) -> str | None:
    """Why there is no controller plot (the controller was off, or never decided), or None when there is one."""
    if not summary.auto:
        return "the batch size was fixed: the controller was off"
    if not summary.chosen_batch_sizes:
        return "the controller made no decision in this run"
    return None


def plain_number(value: float, _position: object = None) -> str:
    """A tick label without scientific notation: 5, 40, 0.25, 0.0012."""
    return f"{value:.4g}" if value < 1e4 else f"{value:,.0f}"


def delay_ticks(delays: Sequence[float]) -> list[float]:
    """1-2-5 steps spanning the delays, so a log axis has several plain labels rather than one per decade."""
    lo, hi = min(delays), max(delays)
    ticks: list[float] = []
    decade = 10.0 ** math.floor(math.log10(lo))
    while decade <= hi * 10:
        ticks += [step * decade for step in (1, 2, 5) if lo / 1.5 <= step * decade <= hi * 1.5]
        decade *= 10
    return ticks


def spaced_ticks(sizes: Sequence[int], keep: int | None = None, min_ratio: float = 1.25) -> list[int]:
    """The sizes with any too close to a neighbour on a log axis left out (``keep`` always stays)."""
    ticks: list[int] = []
    for size in sorted(set(sizes)):
        if ticks and size / ticks[-1] < min_ratio:
            if size == keep:
                ticks[-1] = size
            continue
        ticks.append(size)
    return ticks


def plot_controller(summary: ControllerSummary, path: Path) -> Path | None:
    """The delay samples (per trace, vs batch size, log-log), the controller's own round model (rollouts in closed
    form + its fit of the pipeline), τ, the lowest point and its choice with its reason. Nothing is written when the
    controller was off or never decided (see :func:`controller_plot_skipped`); returns the path written, or None."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from combee_core.control.delay_model import PowerLawFit, RoundModel, rollout_waves

    if controller_plot_skipped(summary) is not None:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.4), dpi=120)
    unit = summary.clock_description or ("LLM critical path" if summary.clock == "modelled"
                                         else "wall delay, batch closed to version")
    points = [s for s in summary.samples if s.per_trace_delay_s > 0]
    fitted = [s for s in summary.fit_samples if s.per_trace_delay_s > 0]
    ax.scatter([s.batch_size for s in points], [s.per_trace_delay_s for s in points], s=34, facecolors="none",
               edgecolors="#7f7f7f", linewidths=0.9, label=f"every batch of the run ({len(points)})", zorder=2)
    if fitted:
        ax.scatter([s.batch_size for s in fitted], [s.per_trace_delay_s for s in fitted], s=14, color="#1f77b4",
                   label=f"samples behind the last decision ({len(fitted)})", zorder=3)
    sizes = sorted({s.batch_size for s in points} | set(summary.chosen_batch_sizes))
    delays = [s.per_trace_delay_s for s in points]
    chosen = summary.chosen_batch_sizes[-1]
    lo = max(1.0, min(sizes + [summary.bs_min or 1]) * 0.8)
    hi = max(sizes + [summary.bs_max or 1]) * 1.1
    grid = sorted({max(1, round(lo * (hi / lo) ** (i / 199))) for i in range(200)})
    task_s, agents = summary.rollout_task_s or 0.0, summary.fleet_agents
    if task_s > 0:
        floor = [rollout_waves(g, agents) * task_s / g for g in grid]
        delays += floor
        ax.plot(grid, floor, color="#ff7f0e", linewidth=1.0, linestyle="--",
                label=f"rollouts alone: ceil(bs/{agents or 'bs'})·{task_s:.3g} s / bs (measured)")
    if summary.fit_A is not None and summary.fit_alpha is not None:
        model = RoundModel(task_s=task_s, agents=agents,
                           pipeline=PowerLawFit(summary.fit_A, summary.fit_alpha, summary.fit_r2 or 0.0, 0))
        curve = [model.per_trace(g) for g in grid]
        delays += curve
        what = "rollouts + fitted pipeline" if task_s > 0 else "fitted"
        ax.plot(grid, curve, color="#d62728", linewidth=1.6,
                label=f"controller's model ({what} {summary.fit_A:.3g}·bs^-{summary.fit_alpha:.2f},"
                      f" r² = {summary.fit_r2:.2f})")
        at: float | None = model.per_trace(chosen)
        if summary.best_batch_size is not None and summary.best_batch_size != chosen:
            ax.plot([summary.best_batch_size], [model.per_trace(summary.best_batch_size)], marker="o", markersize=7,
                    color="#9467bd", linestyle="none", zorder=4,
                    label=f"lowest modelled delay in the bounds: {summary.best_batch_size}")
    else:
        measured = [s.per_trace_delay_s for s in points if s.batch_size == chosen]
        at = sum(measured) / len(measured) if measured else None
    if at is not None:
        ax.plot([chosen], [at], marker="*", markersize=16, color="#2ca02c", zorder=5, linestyle="none",
                label=f"chosen batch size {chosen} ({summary.last_phase})")
    else:
        ax.axvline(chosen, color="#2ca02c", linestyle="--", linewidth=1.4,
                   label=f"chosen batch size {chosen} ({summary.last_phase}: not measured yet)")
    if summary.bs_max is not None and summary.bs_max <= hi:
        ax.axvline(summary.bs_max, color="#9467bd", linestyle="--", linewidth=1.0,
                   label=f"upper bound {summary.bs_max} (against quality risk)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    bounds = [b for b in (summary.bs_min, summary.bs_max) if b is not None and lo <= b <= hi]
    ax.xaxis.set_major_locator(FixedLocator(spaced_ticks(sizes + bounds, keep=chosen)))
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.xaxis.set_minor_locator(NullLocator())
    if delays:
        ax.yaxis.set_major_locator(FixedLocator(delay_ticks(delays)))
        ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
        ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("batch size (traces per version); ticks at the sizes sampled and the bounds")
    ax.set_ylabel("per-trace delay, s")
    ax.set_title(f"Controller: delay per trace vs batch size (an epoch's time is traces x this)\n{unit}",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=7.5)
    note = [f"τ = {summary.tau:g}: the controller picks bs*, the smallest batch size whose modelled per-trace delay is "
            f"within τ of the lowest the bounds [{summary.bs_min or '?'}, {summary.bs_max or '?'}] allow; a smaller "
            f"rung whose rollouts alone cost more than that is never profiled. Delays: {unit}.",
            f"Last decision (the controller publishes one when the size or the phase changes): {summary.last_reason}"]
    fig.text(0.01, 0.01, "\n".join(textwrap.fill(line, 125) for line in note), fontsize=7, va="bottom",
             color="#333333")
    fig.tight_layout(rect=(0, 0.15, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path
