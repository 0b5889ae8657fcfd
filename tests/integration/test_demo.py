"""`combee demo` end to end on the real broker: the command, its results file and plots, and async mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from combee_core.settings import CombeeSettings
from streams.demo.results import DemoOptions, DemoResult
from streams.demo.run import run_demo
from tests.integration.topology_support import env_without_combee

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_demo_command_learns_and_writes_results_and_plots(kafka, unique_prefix, tmp_path: Path):
    out = tmp_path / "results"
    command = [sys.executable, "-m", "streams.cli", "demo", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
               "--traces", "80", "--fleet", "8", "--batch-size", "20", "--out", str(out), "--plain"]
    env = env_without_combee(COMBEE_SIM_CLOCK="virtual")
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Combee demo summary" in completed.stdout
    assert "held-out accuracy before -> after" in completed.stdout
    # Fixed size: each version's line says the size the next batch uses, the last that no traces are left.
    version_lines = [line for line in completed.stdout.splitlines() if "held-out accuracy 0" in line]
    assert len(version_lines) == 4 and all("next batch size 20 " in line for line in version_lines[:3])
    assert "next batch size none (every trace is in a version)" in version_lines[3]
    assert "no controller plot (the batch size was fixed: the controller was off)" in completed.stdout

    result = DemoResult.model_validate_json((out / "results.json").read_text())
    assert result.traces_sent == 80 and result.traces_incorporated == 80
    assert [row.version for row in result.versions] == [1, 2, 3, 4]
    assert all(row.batch_size == 20 for row in result.versions)
    assert result.accuracy_after > result.accuracy_before
    assert result.fleet.rounds == 4 and result.fleet.versions_used == [0, 1, 2, 3]
    assert not result.controller.auto and result.controller.chosen_batch_sizes == []
    assert len(result.controller.samples) == 4
    assert result.usage.calls > 0 and result.usage.cost_usd > 0
    assert [Path(plot).name for plot in result.plots] == ["held_out_accuracy.png"]
    for plot in result.plots:
        assert Path(plot).read_bytes()[:8] == PNG_MAGIC
        assert Path(plot).stat().st_size > 10_000
    final = json.loads((out / "playbook.json").read_text())
    assert final["version"] == 4 and len(final["entries"]) == result.playbook_entries

    # The same prefix again would repeat every trace id (ignored as duplicates): refused up front, clearly.
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 2
    assert "already hold 4 version(s)" in again.stderr and "fresh --prefix" in again.stderr


async def test_async_demo_with_the_controller_reports_staleness_and_decisions(kafka, unique_prefix, tmp_path):
    settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix, auto_batch_size=True, sim_clock="virtual",
                                   controller_clock="modelled", max_wait_s=1.0, partitions=2)
    options = DemoOptions(fleet=6, mode="async", traces=90, out=tmp_path, task_time_s=0.6)
    seen = []
    result = await run_demo(settings, kafka.bootstrap, kafka.profile, options, on_progress=seen.append)

    assert result.traces_incorporated == 90 and result.dead_letters == 0
    versions = [row.version for row in result.versions]
    assert versions == list(range(1, len(versions) + 1))
    # The controller profiles other sizes than the start size, and the batcher follows it.
    assert result.controller.chosen_batch_sizes
    assert {row.batch_size for row in result.versions} - {settings.batch_size}
    # Agents kept working while versions were published: some traces ran with an older version.
    assert len(result.fleet.versions_used) > 1
    assert max(row.max_staleness for row in result.versions) >= 1
    assert result.accuracy_after > result.accuracy_before
    assert seen and seen[-1].phase == "done"
    # The plot is the controller's own fit and choice, from its last decision.
    assert Path(tmp_path / "controller_delay_fit.png").read_bytes()[:8] == PNG_MAGIC
    assert result.controller.last_reason and result.controller.last_phase in ("profiling", "fitted")



async def test_demo_with_promotion_shows_decisions_runs_only_promoted_versions_and_prices_the_gain(
        kafka, unique_prefix, tmp_path):
    settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix, batch_size=20, sim_clock="virtual",
                                   max_wait_s=1.0, partitions=2, promotion=True)
    options = DemoOptions(fleet=8, mode="sync", traces=80, out=tmp_path, misleading=20,
                          task_time_s=0.02)  # not the rollout model's 38 s: this test is about promotion
    seen = []
    result = await run_demo(settings, kafka.bootstrap, kafka.profile, options, on_progress=seen.append)

    assert result.promotion and result.misleading_sent == 20 and result.traces_incorporated == 100
    assert [p.candidate_version for p in result.promotions] == [row.version for row in result.versions]
    assert [row.decision for row in result.versions] == [p.action for p in result.promotions]
    # The misleading traces' candidate is rejected, and the version after it is built on the incumbent.
    rejected = [row for row in result.versions if row.decision == "reject"]
    assert rejected, [p.reason for p in result.promotions]
    after = [row for row in result.versions if row.version == rejected[0].version + 1]
    assert not after or after[0].parent_version < rejected[0].version
    promoted = {0} | {p.candidate_version for p in result.promotions if p.action == "promote"}
    assert set(result.fleet.versions_used) <= promoted  # the agents never ran an unpromoted candidate
    assert result.served_version == result.promotions[-1].served_version
    assert result.accuracy_after == max(row.held_out_accuracy for row in result.versions if row.decision == "promote")
    assert result.cost_usd_per_point is not None and result.cost_usd_per_point > 0
    by_version = {row.version: row.held_out_accuracy for row in result.versions}
    for decision in result.promotions:  # one version, one score: the demo's line and the promoter's agree
        assert decision.held_out_score == pytest.approx(by_version[decision.candidate_version], abs=1e-12)
    assert seen[-1].traces_total == 80 + 20  # the fleet's traces and the misleading ones
    assert any("promote (held-out" in line for line in seen[-1].promotions)  # shown live
    assert any("reject (held-out" in line for line in seen[-1].promotions)
    assert Path(tmp_path / "held_out_accuracy.png").read_bytes()[:8] == PNG_MAGIC
