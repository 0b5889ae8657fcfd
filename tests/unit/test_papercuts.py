"""A newcomer's papercuts: help that lists only the flags a command uses, one-line errors for missing files, and
``tail`` telling an added entry from an ADD folded into an existing one."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from combee_core.models import AddOp, PlaybookVersion
from combee_core.playbook import Playbook, apply_operations
from streams.cli import build_parser
from streams.topology.observe import describe_version
from tests.hang_guard import SUBPROCESS_HANG_S

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _help(*command: str) -> str:
    parser = build_parser()
    for action in parser._subparsers._group_actions:  # argparse has no public lookup
        sub = action.choices[command[0]]
        for name in command[1:]:
            sub = next(a for a in sub._subparsers._group_actions).choices[name]
        return sub.format_help()
    raise AssertionError(command)


@pytest.mark.parametrize("command", [("produce",), ("tail",), ("playbook", "import"), ("playbook", "export")])
def test_commands_without_consumer_groups_or_random_choices_offer_no_run_id_or_seed(command):
    text = _help(*command)
    assert "--run-id" not in text and "--seed" not in text


def test_status_offers_the_run_id_that_names_the_groups_it_reads_but_no_seed():
    text = _help("status")
    assert "--run-id" in text and "--seed" not in text


def test_export_shows_the_run_settings_it_records_as_such_and_no_llm_record_flags():
    text = _help("export")
    recorded = text.split("the recorded run's settings:", 1)[1]
    for flag in ("--seed", "--batch-size", "--copies", "--max-fan-in", "--model"):
        assert flag in recorded
    assert "--llm-record" not in text
    assert "which `combee replay` reruns the run with" in " ".join(recorded.split())


def _combee(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMBEE_") or k == "COMBEE_STATE_DIR"}
    return subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S, env=env)


def test_diff_of_a_missing_archive_says_the_file_is_missing(tmp_path):
    missing = tmp_path / "nope.jsonl"
    result = _combee("diff", str(missing), str(missing), "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 2
    assert result.stderr.strip() == f"combee diff: {missing}: no such archive file"


def test_diff_of_a_tampered_archive_says_which_line_and_nothing_about_replaying(tmp_path):
    from tests.unit.test_archive import sample_lines

    lines = sample_lines()
    lines[3] = lines[3].replace(b'"t-2"', b'"t-9"')
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"\n".join(lines) + b"\n")
    result = _combee("diff", str(tampered), str(tampered))
    assert result.returncode == 2
    assert "line 4: checksum mismatch" in result.stderr and "replayed" not in result.stderr


def test_replay_of_a_missing_archive_names_the_file_not_line_0(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = _combee("replay", "--archive", str(missing))
    assert result.returncode == 2
    assert result.stderr.strip() == f"combee replay: {missing}: no such file"


def _version(playbook: Playbook, operations) -> PlaybookVersion:
    result = apply_operations(playbook, operations, playbook.version + 1)
    entries = list(result.playbook.entries)
    return PlaybookVersion(
        playbook_id="pb", version=playbook.version + 1, parent_version=playbook.version, batch_id=playbook.version,
        entries=entries, next_entry_number=result.playbook.next_entry_number, operations=result.applied,
        lineage=["t1"], stats={"batch_size": 1, "k": 1, "p": 1}, content_hash="x", published_at=NOW)


def test_tail_shows_an_add_merged_into_an_existing_entry_as_reinforced_not_added():
    first = _version(Playbook.empty("pb"), [AddOp(section="units", content="Convert every unit to SI first.")])
    playbook = Playbook.from_entries("pb", 1, first.entries, first.next_entry_number)
    second = _version(playbook, [AddOp(section="units", content="Convert every unit to SI first!"),
                                 AddOp(section="dates", content="Dates are ISO 8601.")])
    text = describe_version(second)
    assert "+ [dat-00002] Dates are ISO 8601." in text
    assert "+ [uni-00001]" not in text
    assert "= [uni-00001] helpful 1, outcome unused (ADD merged: near-duplicate of uni-00001)" in text


def test_a_replays_default_run_id_is_its_prefixs_last_part():
    from streams.runs.replay import replay_run_id

    assert replay_run_id("combee.replay-84123598.") == "replay-84123598"
    assert replay_run_id("new.") == "new" and replay_run_id("") == "replay"


def test_the_health_port_binds_loopback_unless_told_and_deploy_sets_every_address():
    from pathlib import Path

    from combee_core.settings import CombeeSettings
    from streams.cli.flags import PIPELINE_FLAGS, flag_overrides
    from streams.cli.worker import WORKER_FLAGS
    from streams.topology.health import HealthServer

    assert CombeeSettings.load(env={}).health_host == "127.0.0.1"
    assert HealthServer(lambda: (True, {})).host == "127.0.0.1"
    args = build_parser().parse_args(["worker", "--health-host", "0.0.0.0", "--builtin-evaluator-playbooks", "*"])
    settings = CombeeSettings.load(env={}, **flag_overrides(args, (*PIPELINE_FLAGS, *WORKER_FLAGS)))
    assert (settings.health_host, settings.builtin_evaluator_playbooks) == ("0.0.0.0", "*")
    root = Path(__file__).parents[2]
    for path in ("deploy/Dockerfile", "docker-compose.yml", "deploy/k8s/configmap.yaml"):  # probes come from outside
        assert "COMBEE_HEALTH_HOST" in (root / path).read_text() and "0.0.0.0" in (root / path).read_text(), path
