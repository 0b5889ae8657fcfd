"""``combee demo``: flags, live progress (rich on a terminal, plain lines otherwise) and the summary table."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from combee_core.settings import ENV_PREFIX, CombeeSettings
from streams.cli.flags import add_common, flag_overrides
from streams.cli.running import broker_for

DEMO_DEFAULTS = {
    # Fast enough for a one-minute demo, still paced by the latency model (see docs/simulator.md).
    "sim_time_scale": 0.02,
    "sim_clock": "real",
    "controller_clock": "modelled",
    "max_wait_s": 2.0,
    "partitions": 2,
    "auto_batch_size": True,
}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="a simulated agent fleet learning a playbook live (embedded broker, offline model)",
        description="Run a simulated agent fleet against the whole topology and watch the playbook improve. "
                    "Writes results.json, playbook.json and PNG plots to --out.")
    add_common(parser)
    parser.add_argument("--model", help="LLM model for all roles (default combee-sim/default, the offline simulator)")
    parser.add_argument("--fleet", type=int, default=40, help="agents in the fleet (default 40)")
    parser.add_argument("--batch-size", default=None, help="'auto' (the controller, default) or a fixed number")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync",
                        help="sync: the fleet waits for each version (default); async: continuous, staleness shown")
    parser.add_argument("--traces", type=int, help="traces in all (default: one pass over the train split)")
    parser.add_argument("--families", type=int, default=24, help="rule families in the task suite (default 24)")
    parser.add_argument("--out", type=Path, default=Path("demo-results"), help="results folder (default demo-results)")
    parser.add_argument("--time-scale", type=float, dest="sim_time_scale",
                        help=f"multiplier on the simulator's latency (default {DEMO_DEFAULTS['sim_time_scale']})")
    parser.add_argument("--max-wait", dest="max_wait_s", type=float, help="close a batch after this many seconds")
    parser.add_argument("--task-time", dest="task_time_s", type=float,
                        help="simulated seconds an agent spends on a task (default: sync, the rollout model's 38 s "
                             "times the time scale; async, 1.0)")
    parser.add_argument("--promotion", action="store_const", const=True,
                        help="gate versions: agents run only versions promoted on held-out scores "
                        "(docs/architecture.md, Promotion)")
    parser.add_argument("--misleading", type=int, default=0,
                        help="publish this many misleading traces (harmful rules) halfway: with --promotion their "
                        "candidate is rejected and learning continues from the incumbent")
    parser.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    parser.set_defaults(handler=cmd_demo)


def demo_settings_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> CombeeSettings:
    """Settings: demo defaults, then ``COMBEE_*`` environment variables, then flags."""

    env = dict(os.environ if env is None else env)
    overrides = {name: value for name, value in DEMO_DEFAULTS.items() if ENV_PREFIX + name.upper() not in env}
    overrides.update(flag_overrides(args, ("topic_prefix", "run_id", "run_seed", "sim_time_scale", "max_wait_s",
                                           "broker_connect_timeout_s", "promotion")))
    if args.batch_size not in (None, "auto"):
        overrides["auto_batch_size"] = False  # a number fixes the size (the demo's default is the controller)
    return CombeeSettings.load(env, **overrides)


async def cmd_demo(args: argparse.Namespace) -> int:
    from streams.demo.results import DemoOptions
    from streams.demo.run import DemoError, run_demo

    settings = demo_settings_from_args(args)
    options = DemoOptions(fleet=args.fleet, mode=args.mode, traces=args.traces, families=args.families, out=args.out,
                          task_time_s=args.task_time_s, misleading=args.misleading)
    live = not args.plain and sys.stdout.isatty()
    async with broker_for(settings, embedded=True) as (bootstrap, profile):  # --bootstrap, else its own broker
        view = LiveView() if live else PlainView()
        try:
            with view:
                result = await run_demo(settings, bootstrap, profile, options, on_progress=view.update)
        except DemoError as error:
            print(f"combee demo: {error}", file=sys.stderr)
            return 2
    print_summary(result)
    return 0


def version_line(row, traces_sent: int, traces_total: int, llm_calls: int, next_size: str) -> str:
    """One plain log line for a published version; ``next_size`` says what the batch after it uses: the traces it
    was formed of, which is the controller's target when it filled up, fewer when ``max_wait`` closed it or the
    traces ran out (the summary lists both: decisions and batches formed)."""
    return (f"[{row.seconds_since_start:6.1f}s] traces {traces_sent}/{traces_total}  v{row.version}: "
            f"batch {row.batch_size}, {row.entries} entries, held-out accuracy {row.held_out_accuracy:.3f}  "
            f"next batch size {next_size}  LLM calls {llm_calls}")


NO_NEXT_BATCH = "none (every trace is in a version)"


class VersionLog:
    """Holds each version's line until the size of the batch after it is known, then releases it.

    With a fixed size that is known at once. With the controller on, the size a batch gets depends on when the
    batcher sees the controller's latest decision (batches already closed keep the old size), so the line waits for
    the next version, whose batch size is then certain; at the end of the run (or of a phase) a waiting line says
    "pending". Once every trace is in a version, there is no next batch: "none".
    """

    def __init__(self) -> None:
        self._seen = 0
        self._waiting: list[tuple[Any, int, int]] = []
        """(row, traces sent, LLM calls) of versions whose line is not out yet, oldest first."""

    def update(self, progress) -> list[str]:
        """Lines that can be printed after this progress report."""
        return [line for _, line in self.update_events(progress)]

    def flush(self, progress) -> list[str]:
        """Release every waiting line: the run moved on (a phase change, or the end)."""
        return [line for _, line in self.flush_events(progress)]

    def waiting_since(self) -> float | None:
        """When the oldest version whose line is not out yet arrived (None when none waits)."""
        return self._waiting[0][0].seconds_since_start if self._waiting else None

    def update_events(self, progress) -> list[tuple[float, str]]:
        """(when the version arrived, its line) of the lines :meth:`update` releases."""
        events: list[tuple[float, str]] = []
        for row in progress.history[self._seen:]:
            if self._waiting:  # the version after it tells exactly what the next batch was
                events += self._release(progress, str(row.batch_size))
            self._waiting.append((row, progress.traces_sent, progress.llm_calls))
        self._seen = len(progress.history)
        if progress.traces_learned >= progress.traces_total:
            events += self._release(progress, NO_NEXT_BATCH)
        elif not progress.auto_batch_size:
            events += self._release(progress, str(progress.batch_size))
        return events

    def flush_events(self, progress) -> list[tuple[float, str]]:
        return self._release(progress, NO_NEXT_BATCH if progress.traces_learned >= progress.traces_total
                             else "pending (not batched yet)")

    def _release(self, progress, next_size: str) -> list[tuple[float, str]]:
        events = [(row.seconds_since_start, version_line(row, sent, progress.traces_total, calls, next_size))
                  for row, sent, calls in self._waiting]
        self._waiting.clear()
        return events


class PlainView:
    """One line per phase change, per version and per promotion decision: for logs and pipes. Each line carries the
    time of its event and lines come out in that order: a version's line waits for the size of the batch after it
    (:class:`VersionLog`), so the lines of later events wait with it."""

    def __init__(self) -> None:
        self._phase = ""
        self._versions = VersionLog()
        self._last = None
        self._promotions = 0
        self._held: list[tuple[float, str]] = []
        """(when, line) of events after the oldest version whose line waits."""

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._last is not None:
            self._emit(self._versions.flush_events(self._last))

    def update(self, progress) -> None:
        self._last = progress
        events = self._versions.update_events(progress)
        now = progress.elapsed_now()
        events += [(now, f"[{now:6.1f}s] promotion: {line}") for line in progress.promotions[self._promotions:]]
        self._promotions = len(progress.promotions)
        if progress.phase != self._phase:
            events += self._versions.flush_events(progress)
            self._phase = progress.phase
            events.append((progress.elapsed_s, f"[{progress.elapsed_s:6.1f}s] {progress.phase}"))
        self._emit(events)

    def _emit(self, events: list[tuple[float, str]]) -> None:
        """Print the events not after the oldest waiting version, in time order; hold the others."""
        pending = sorted(self._held + events, key=lambda event: event[0])  # stable: same time, same order
        waiting = self._versions.waiting_since()
        self._held = [event for event in pending if waiting is not None and event[0] > waiting]
        for when, line in pending:
            if waiting is None or when <= waiting:
                print(line, flush=True)


def batch_size_cell(progress) -> str:
    """The live view's batch size: fixed, the controller's latest decision, or that it has not decided yet."""
    if not progress.auto_batch_size:
        return f"{progress.batch_size} (fixed)"
    if progress.decided_batch_size is None:
        return "– (controller profiling…: no decision yet)"
    return f"{progress.decided_batch_size} (controller, {progress.decision_phase})"


class LiveView:
    """A rich live panel: progress bar, current version, accuracy, batch size; ``elapsed`` ticks on its own."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.live = Live(console=self.console, refresh_per_second=8, transient=False)
        self._progress = None

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def update(self, progress) -> None:
        first = self._progress is None
        self._progress = progress
        if first:
            self.live.update(self)  # rendered on every refresh (``__rich__``), so elapsed moves between reports
        else:
            self.live.refresh()

    def __rich__(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        progress = self._progress
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", justify="right")
        table.add_column()
        if progress is None:
            return table
        bar = ProgressBar(total=progress.traces_total, completed=progress.traces_sent, width=40)
        table.add_row("traces", bar)
        table.add_row("", f"{progress.traces_sent}/{progress.traces_total} published")
        table.add_row("phase", progress.phase)
        table.add_row("version", str(progress.version))
        if progress.served_version is not None or progress.promotions:
            table.add_row("agents run", f"v{progress.served_version or 0} (promoted)")
            table.add_row("last decision", progress.promotions[-1] if progress.promotions else "–")
        table.add_row("batch size", batch_size_cell(progress))
        table.add_row("held-out accuracy", f"{progress.accuracy_before:.3f} -> {progress.accuracy:.3f}")
        table.add_row("playbook entries", str(progress.entries))
        table.add_row("LLM calls", f"{progress.llm_calls} (${progress.cost_usd:.4f} simulated)")
        table.add_row("elapsed", f"{progress.elapsed_now():.1f}s")
        return table


def fleet_cell(options, fleet) -> str:
    """The summary's fleet row: rounds exist only in sync mode."""
    if options.mode == "async":
        return f"{options.fleet} agents, async mode (continuous: no rounds)"
    return f"{options.fleet} agents, sync mode, {fleet.rounds} round(s)"


def print_summary(result) -> None:
    """The summary table, then where the results are."""
    from streams.demo.plots import controller_plot_skipped

    promotion = []
    if result.promotion:
        actions = [p.action for p in result.promotions]
        per_point = (f"${result.cost_usd_per_point:.5f} per held-out point (reflect, aggregate, reduce calls)"
                     if result.cost_usd_per_point is not None else "no held-out gain")
        promotion = [
            ("cost per improvement point", per_point),
            ("promotion decisions", f"{actions.count('promote')} promoted, {actions.count('reject')} rejected, "
                                    f"{actions.count('hold')} held; agents run v{result.served_version}"),
        ]
    elif result.promotions:  # without promotion: the guard rolled a version back
        promotion = [("guard", f"{len(result.promotions)} rollback(s): {result.promotions[-1].reason}")]
    rows = [
        *promotion,
        ("versions published", str(len(result.versions))),
        ("traces published / incorporated", f"{result.traces_sent} / {result.traces_incorporated}"),
        ("dead letters", str(result.dead_letters)),
        ("held-out accuracy before -> after", f"{result.accuracy_before:.3f} -> {result.accuracy_after:.3f}"),
        ("playbook entries / tokens", f"{result.playbook_entries} / {result.playbook_tokens}"),
        ("controller's size decisions (targets)",
         ", ".join(map(str, result.controller.chosen_batch_sizes)) or "(fixed)"),
        ("batches formed (traces each)", ", ".join(str(v.batch_size) for v in result.versions) or "none"),
        ("fleet", fleet_cell(result.options, result.fleet)),
        ("max staleness (versions)", str(max((v.max_staleness for v in result.versions), default=0))),
        ("LLM calls", str(result.usage.calls)),
        ("tokens (prompt / completion)", f"{result.usage.prompt_tokens} / {result.usage.completion_tokens}"),
        ("cost", f"${result.usage.cost_usd:.4f}" + (" (simulated)" if "combee-sim" in
                                                        result.settings["aggregator_model"] else "")),
        ("wall time", f"{result.wall_s:.1f}s"),
    ]
    width = max(len(name) for name, _ in rows)
    print()
    print("Combee demo summary")
    print("-" * (width + 30))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 30))
    print(f"results: {result.options.out / 'results.json'}")
    for plot in result.plots:
        print(f"plot:    {plot}")
    skipped = controller_plot_skipped(result.controller)
    if skipped is not None:
        print(f"plot:    no controller plot ({skipped})")
    for reason in result.dead_letter_reasons[:5]:
        print(f"dead letter: {reason}")
