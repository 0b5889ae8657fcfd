"""``combee worker``'s OpenTelemetry flags: one command runs ingest-otlp (and the receiver), no variable needed, and
a worker whose stages are all off (``--stages ingest-otlp`` without ``--otlp``) says so in one line instead of
idling."""

from __future__ import annotations

import pytest

from streams.cli import build_parser, main
from streams.cli.worker import NoStageToRun, worker_plan


def _plan(*argv: str, monkeypatch: pytest.MonkeyPatch):
    for name in ("COMBEE_OTLP_INGEST", "COMBEE_PROMOTION", "COMBEE_GUARD"):
        monkeypatch.delenv(name, raising=False)
    return worker_plan(build_parser().parse_args(["worker", *argv]))


def test_otlp_flags_turn_ingest_on_and_set_what_only_variables_set(monkeypatch):
    settings, stages = _plan("--otlp", "--otlp-port", "0", "--otlp-topic", "my_spans", "--otlp-feedback-wait", "30",
                             "--otlp-default-playbook", "support", "--otlp-group-by", "conversation",
                             monkeypatch=monkeypatch)
    assert settings.otlp_ingest and "ingest-otlp" in stages
    assert (settings.otlp_receiver_port, settings.otlp_topic, settings.otlp_feedback_wait_s) == (0, "my_spans", 30.0)
    assert (settings.otlp_default_playbook, settings.otlp_group_by) == ("support", "conversation")
    assert build_parser().parse_args(["worker", "--otlp", "kafka"]).otlp == "kafka"


def test_ingest_otlp_alone_without_otlp_is_refused_in_one_line_and_runs_with_it(monkeypatch):
    with pytest.raises(NoStageToRun, match="ingest-otlp runs only with --otlp or COMBEE_OTLP_INGEST=1"):
        _plan("--stages", "ingest-otlp", monkeypatch=monkeypatch)
    settings, stages = _plan("--stages", "ingest-otlp", "--otlp", "kafka", monkeypatch=monkeypatch)
    assert settings.otlp_ingest and stages == ("ingest-otlp",)


def test_a_worker_with_no_stage_to_run_refuses_in_one_line(monkeypatch, capsys):
    with pytest.raises(NoStageToRun, match="no stage to run: evaluate runs only with"):
        _plan("--stages", "evaluate", monkeypatch=monkeypatch)
    assert main(["worker", "--stages", "evaluate", "--bootstrap", "127.0.0.1:1"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("combee worker: no stage to run: evaluate runs only with")
