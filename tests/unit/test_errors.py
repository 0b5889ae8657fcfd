"""Every expected failure is a CombeeError, and the CLI turns it into one line and a documented exit status."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys

import pytest

import combee_core
import streams
from combee_core.errors import CombeeError
from combee_core.llm.errors import LLMCallError
from streams import cli
from streams.broker.errors import BrokerLost, BrokerUnreachable
from streams.cli import status as status_command
from tests.hang_guard import SUBPROCESS_HANG_S

NOT_EXPECTED = {
    "combee_core.llm.roles._Attempted",  # private control flow inside the role retry loop, never escapes it
    "streams.topology.runtime.StageFailed",  # a stage raised something unexpected: a bug, which keeps its traceback
    "streams.topology.worker.StageStopped",  # a stage's task ended by itself: a bug, which keeps its traceback
    "combee_core.partitions.ownership.RestoreInProgress",  # two restores at once: a runtime bug, keeps its traceback
    "streams.testing.fault_stream.StreamExhausted",  # a fault test ran out of traces: the test fails (AssertionError)
    "streams.testing.worker_fleet.StagesBehind",  # a stage still behind at a fault test's deadline: it fails
}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (combee_core, streams):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for _, value in inspect.getmembers(module, inspect.isclass):
                if issubclass(value, BaseException) and value.__module__ == info.name:
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_of_the_project_is_a_combee_error_but_the_named_bugs():
    classes = _exception_classes()
    assert len(classes) > 20  # the walk found the project's classes
    assert NOT_EXPECTED <= set(classes), "an exempted class was renamed or removed: update NOT_EXPECTED"
    strays = sorted(name for name, cls in classes.items()
                    if name not in NOT_EXPECTED and not issubclass(cls, CombeeError))
    assert strays == []


def test_re_parented_errors_keep_their_builtin_bases():
    from combee_core.settings import SettingsError
    from streams.topology.pipeline import PipelineTimeout

    assert issubclass(SettingsError, ValueError) and issubclass(BrokerLost, ConnectionError)
    assert issubclass(PipelineTimeout, TimeoutError)
    assert str(BrokerUnreachable("no Kafka broker answers")) == "no Kafka broker answers"


@pytest.mark.parametrize(("error", "code", "line"), [
    (BrokerLost("lost the broker at h:1: no answer for 60 s"), 3, "lost the broker at h:1: no answer for 60 s"),
    (BrokerUnreachable("no Kafka broker answers at h:1\nsecond line"), 2, "no Kafka broker answers at h:1"),
    (LLMCallError("reflector", "m", "timeout", attempts=3), 2, "reflector call to 'm' failed after 3 attempt(s): "
                                                               "timeout"),
])
def test_main_prints_a_combee_error_as_one_line_with_its_exit_status(monkeypatch, capsys, error, code, line):
    def fails(args):
        raise error

    monkeypatch.setattr(status_command, "cmd_status", fails)
    assert cli.main(["status"]) == code
    assert capsys.readouterr().err == f"combee status: {line}\n"


def test_main_lets_a_bug_keep_its_traceback(monkeypatch):
    def fails(args):
        raise KeyError("bug")

    monkeypatch.setattr(status_command, "cmd_status", fails)
    with pytest.raises(KeyError):
        cli.main(["status"])


def test_worker_with_an_unknown_stage_ends_in_one_line_naming_the_valid_stages():
    env = {name: value for name, value in os.environ.items() if not name.startswith("COMBEE_")}
    done = subprocess.run([sys.executable, "-m", "streams.cli", "worker", "--stages", "reflekt"], env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 2
    assert done.stderr == ("combee worker: unknown stage(s) ['reflekt']; choose from reflect, batch, aggregate, "
                           "reduce, control, promote, evaluate, guard, ingest-otlp\n")
