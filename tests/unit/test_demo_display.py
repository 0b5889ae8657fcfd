"""The demo's progress display: the plain log's "next batch size", the live view's batch size and elapsed, and
the summary's fleet row (issue 20)."""

from __future__ import annotations

import time

from streams.cli.demo import LiveView, VersionLog, batch_size_cell, fleet_cell
from streams.demo.fleet import FleetReport
from streams.demo.results import DemoOptions, VersionRow
from streams.demo.run import DemoProgress


def _row(version: int, batch_size: int) -> VersionRow:
    return VersionRow(version=version, batch_id=version - 1, batch_size=batch_size, k=1, entries=3,
                      playbook_tokens=10, held_out_accuracy=0.5, max_staleness=0, delay_s=0.1,
                      llm_critical_path_s=0.1, llm_calls=2, seconds_since_start=float(version))


def _auto(**changes) -> DemoProgress:
    progress = DemoProgress(traces_total=100, auto_batch_size=True, batch_size=40)
    for name, value in changes.items():
        setattr(progress, name, value)
    return progress


def _decide(progress: DemoProgress, size: int, phase: str = "profiling") -> None:
    progress.decisions += 1
    progress.decided_batch_size, progress.decision_phase = size, phase


def test_a_version_line_waits_for_the_next_version_and_shows_its_batch_size_not_the_size_just_used():
    log, progress = VersionLog(), _auto(traces_sent=40)
    progress.history.append(_row(1, 40))
    assert log.update(progress) == []
    _decide(progress, 10)  # a decision is not enough: batches already closed keep the size they had
    assert log.update(progress) == []
    progress.history.append(_row(2, 5))
    [line] = log.update(progress)
    assert "v1: batch 40" in line and "next batch size 5 " in line
    assert line.startswith("[   1.0s] traces 40/100")  # when version 1 arrived, not when its line went out


def test_at_the_end_a_waiting_line_says_pending_or_that_every_trace_was_sent():
    log, progress = VersionLog(), _auto(traces_sent=50)
    progress.history.append(_row(1, 50))
    log.update(progress)
    progress.traces_learned = 50
    assert "next batch size pending" in log.flush(progress)[0]
    progress.history.append(_row(2, 50))
    progress.traces_sent = progress.traces_learned = 100
    [line] = log.update(progress)
    assert "v2: batch 50" in line and "next batch size none (every trace is in a version)" in line


def test_with_a_fixed_size_the_line_is_printed_at_once_with_that_size():
    log = VersionLog()
    progress = DemoProgress(traces_total=50, auto_batch_size=False, batch_size=25, traces_sent=25, traces_learned=25)
    progress.history.append(_row(1, 25))
    [line] = log.update(progress)
    assert "next batch size 25 " in line
    progress.history.append(_row(2, 25))
    progress.traces_learned = 50
    [line] = log.update(progress)
    assert "v2: batch 25" in line and "next batch size none" in line


def test_the_live_batch_size_says_profiling_until_the_first_decision():
    progress = _auto()
    assert "40" not in batch_size_cell(progress) and "profiling" in batch_size_cell(progress)
    _decide(progress, 5)
    assert batch_size_cell(progress) == "5 (controller, profiling)"
    assert batch_size_cell(DemoProgress(traces_total=1, batch_size=40)) == "40 (fixed)"


def test_the_live_elapsed_ticks_from_the_demos_start_between_reports():
    from rich.console import Console

    progress = _auto(started=time.monotonic() - 7.0)  # no report since the start, 7 s ago
    view = LiveView()
    view._progress = progress  # what update() stores
    console = Console(width=100, record=True)
    console.print(view)
    text = console.export_text()
    elapsed = float(text.split("elapsed", 1)[1].split("s", 1)[0])
    assert elapsed >= 7.0


def test_the_async_summary_says_there_are_no_rounds():
    report = FleetReport(traces_sent=10, rounds=1, versions_used=[0], wall_s=1.0)
    assert "round" not in fleet_cell(DemoOptions(mode="async"), report).replace("no rounds", "")
    assert fleet_cell(DemoOptions(mode="sync", fleet=4), report.model_copy(update={"rounds": 12})) == (
        "4 agents, sync mode, 12 round(s)")


def test_the_accuracy_plots_legend_never_covers_a_point_such_as_the_rejected_version():
    import matplotlib.pyplot as plt

    from streams.demo.plots import accuracy_figure

    rows = [_row(v, 20).model_copy(update={"held_out_accuracy": 0.95, "decision": "promote"}) for v in range(1, 9)]
    rows[4] = rows[4].model_copy(update={"held_out_accuracy": 0.24, "decision": "reject"})  # low, lower right
    fig = accuracy_figure(rows, 0.3)
    try:
        fig.canvas.draw()
        [ax] = fig.axes
        legend = ax.get_legend().get_window_extent()
        assert legend.y1 <= ax.get_window_extent().y0  # below the axes, wherever the points are
        rejected = ax.transData.transform((5, 0.24))
        assert not legend.contains(*rejected)
    finally:
        plt.close(fig)


def test_plain_lines_come_out_in_the_order_of_their_events_with_times_that_never_go_back(capsys):
    from streams.cli.demo import PlainView

    progress = _auto(traces_sent=40, started=time.monotonic() - 5.0, phase="fleet running (sync)")
    view = PlainView()
    progress.history.append(_row(1, 40))  # v1 arrived at 1.0 s; its line waits for v2's batch size
    view.update(progress)
    progress.promotions.append("v1 promote (held-out 0.768 vs 0.346): agents run v1")  # decided at ~5 s
    view.update(progress)
    progress.history.append(_row(6, 20))  # the next version (at 6.0 s) releases v1's line
    view.update(progress)
    with view:
        pass  # the end flushes the rest
    lines = capsys.readouterr().out.splitlines()
    times = [float(line[1:].split("s]", 1)[0]) for line in lines]
    assert times == sorted(times), lines
    assert [line.split("]", 1)[1].split(":")[0].strip() for line in lines] == [
        "fleet running (sync)", "traces 40/100  v1", "promotion", "traces 40/100  v6"]

