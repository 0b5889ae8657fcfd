"""Faults at the edges, without a broker: the broker record, storage URLs, the log flood guard, the watchdog on an
address nobody answers, and what the CLI prints for expected failures."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest

from streams.broker.child_process import find_free_port
from streams.broker.errors import BrokerLost, BrokerStartError, BrokerUnreachable, NoBrokerFound, StorageURLError
from streams.broker.probe import bootstrap_addresses, kafka_answers
from streams.broker.state import (
    BrokerRecord,
    clear_record,
    process_alive,
    read_record,
    record_path,
    state_dir,
    write_record,
)
from streams.broker.tansu import EmbeddedBroker, check_storage_url
from streams.broker.watchdog import BrokerWatchdog
from streams.cli import build_parser, expected_failure_code, main
from streams.cli.flags import settings_from_args
from streams.cli.log_flood import RepeatedLogLimit
from streams.cli.running import NO_BROKER_HELP


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("COMBEE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("COMBEE_KAFKA_BOOTSTRAP", raising=False)
    return tmp_path / "state"


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# ---------------------------------------------------------------------------------------------- the broker record


def test_state_dir_is_the_env_override_else_xdg_state_home_else_home(tmp_path):
    assert state_dir({"COMBEE_STATE_DIR": "/x/y", "XDG_STATE_HOME": "/s"}) == tmp_path.__class__("/x/y")
    assert state_dir({"XDG_STATE_HOME": "/s"}).as_posix() == "/s/combee"
    assert state_dir({}).as_posix().endswith("/.local/state/combee")
    assert record_path({"COMBEE_STATE_DIR": "/x"}).as_posix() == "/x/broker.json"


def test_a_record_of_a_running_process_is_read_back(state):
    record = BrokerRecord.now("127.0.0.1:9999", "memory://tansu/")
    path = write_record(record)
    assert path == state / "broker.json"
    assert read_record() == record
    assert [p.name for p in state.iterdir()] == ["broker.json"]  # no temporary file left behind


def test_a_stale_record_is_ignored_and_removed(state):
    write_record(BrokerRecord.now("127.0.0.1:9999", "memory://tansu/", pid=_dead_pid()))
    assert read_record() is None
    assert not (state / "broker.json").exists()


def test_a_zombie_counts_as_gone():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # exited, not yet reaped
        stat = open(f"/proc/{process.pid}/stat").read()
        if stat.rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.02)
    assert not process_alive(process.pid)
    process.wait()
    assert not process_alive(process.pid)


def test_a_broker_removes_only_its_own_record(state):
    write_record(BrokerRecord.now("127.0.0.1:9999", "memory://tansu/", pid=1))
    clear_record()  # this process is not pid 1
    assert (state / "broker.json").exists()
    clear_record(pid=1)
    assert not (state / "broker.json").exists()
    clear_record()  # nothing there: fine


def test_an_unreadable_record_is_ignored(state):
    state.mkdir(parents=True)
    (state / "broker.json").write_text("{not json")
    assert read_record() is None


# ---------------------------------------------------------------------------------------------- storage


@pytest.mark.parametrize("url", ["memory://tansu/", "s3://tansu/", "s3://my-bucket/prefix/"])
def test_storage_urls_the_shipped_tansu_accepts(url):
    assert check_storage_url(url) == url


@pytest.mark.parametrize("url", ["file:///tmp/x", "postgres://u:p@localhost/db", "sqlite:///x.db", "s3://", "tansu"])
def test_storage_urls_it_does_not_are_refused_with_the_choices(url):
    with pytest.raises(StorageURLError, match=r"memory://tansu/.*s3://BUCKET/"):
        check_storage_url(url)


def test_the_storage_url_reaches_the_tansu_command_line(tmp_path):
    argv_file = tmp_path / "argv"
    fake = tmp_path / "tansu"
    fake.write_text(f'#!/bin/sh\necho "$@" > {argv_file}\nexit 1\n')
    fake.chmod(0o755)
    broker = EmbeddedBroker(binary=fake, storage="s3://tansu/", startup_timeout_s=5)
    with pytest.raises(BrokerStartError):
        broker.start()
    broker.cleanup()
    assert "--storage-engine s3://tansu/" in argv_file.read_text()


def test_the_broker_command_is_durable_unless_told_memory_or_a_storage_url():
    args = build_parser().parse_args(["broker"])
    assert args.storage is None and not args.memory  # cmd_broker runs the durable broker (SeaweedFS + Tansu)
    assert build_parser().parse_args(["broker", "--memory"]).memory
    assert EmbeddedBroker().storage == "memory://tansu/"  # an EmbeddedBroker alone stays memory-only
    assert build_parser().parse_args(["broker", "--storage", "s3://b/"]).storage == "s3://b/"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["broker", "--memory", "--storage", "s3://b/"])


# ---------------------------------------------------------------------------------------------- log floods


def _record(msg: str, *args: object, name: str = "aiokafka.conn", level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_message_is_shown_a_few_times_per_window_then_counted():
    now = [0.0]
    limit = RepeatedLogLimit(burst=3, window_s=30, clock=lambda: now[0])
    shown = [limit.filter(_record("Unable connect to node %s", i)) for i in range(1000)]
    assert shown.count(True) == 3
    assert limit.filter(_record("another template"))  # other messages are not held back
    now[0] = 31.0
    record = _record("Unable connect to node %s", 7)
    assert limit.filter(record)
    assert record.getMessage() == "Unable connect to node 7 [997 more like this not shown]"


def test_the_same_template_from_another_logger_is_counted_apart():
    limit = RepeatedLogLimit(burst=1, window_s=30, clock=lambda: 0.0)
    assert limit.filter(_record("x", name="a"))
    assert limit.filter(_record("x", name="b"))
    assert not limit.filter(_record("x", name="a"))


def test_a_kafka_clients_many_messages_about_one_lost_broker_are_one_line_per_logger_and_level():
    now = [0.0]
    limit = RepeatedLogLimit(burst=3, window_s=30, clock=lambda: now[0], client_loggers=("aiokafka",))
    noise = [_record(text, name=name) for name, text in (
        ("aiokafka", "Unable connect to node with id 111: refused"), ("aiokafka", "Unable to update metadata"),
        ("aiokafka.consumer.fetcher", "Failed fetch messages from 111"),
        ("aiokafka.consumer.fetcher", "Failed fetch messages from 112"))] * 5
    assert sum(limit.filter(record) for record in noise) == 2  # one per logger
    assert limit.filter(_record("broker does not answer; stopping in 6 s", name="streams.broker.watchdog"))
    now[0] = 31.0
    record = _record("Unable to update metadata", name="aiokafka")
    assert limit.filter(record) and record.getMessage().endswith("[9 more like this not shown]")


# ---------------------------------------------------------------------------------------------- watchdog


def test_bootstrap_addresses():
    assert bootstrap_addresses("a:1, b:2") == [("a", 1), ("b", 2)]
    assert bootstrap_addresses("kafka") == [("kafka", 9092)]


async def test_nobody_answers_on_a_free_port():
    assert not await kafka_answers(f"127.0.0.1:{find_free_port()}", timeout_s=1)


async def test_the_watchdog_stops_after_the_grace_with_the_cause():
    stop = asyncio.Event()
    bootstrap = f"127.0.0.1:{find_free_port()}"
    watchdog = BrokerWatchdog(bootstrap, grace_s=0.5, stop=stop, interval_s=0.05)
    started = time.monotonic()
    await asyncio.wait_for(watchdog.run(), 10)
    assert stop.is_set() and isinstance(watchdog.cause, BrokerLost)
    assert time.monotonic() - started >= 0.5
    assert f"lost the broker at {bootstrap}: no answer for" in str(watchdog.cause)


async def test_a_worker_whose_broker_does_not_answer_is_not_ready():
    from streams.topology.health import WorkerReadiness

    stop = asyncio.Event()
    watchdog = BrokerWatchdog(f"127.0.0.1:{find_free_port()}", grace_s=60, stop=stop, interval_s=0.05)
    readiness = WorkerReadiness(broker=watchdog)
    task = asyncio.create_task(watchdog.run())
    deadline = time.monotonic() + 5
    while watchdog.unreachable_since is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert readiness.report() == (False, {"broker": "unreachable"})


async def test_the_watchdog_returns_quietly_when_stopped_by_someone_else():
    stop = asyncio.Event()
    watchdog = BrokerWatchdog(f"127.0.0.1:{find_free_port()}", grace_s=60, stop=stop, interval_s=0.05)
    task = asyncio.create_task(watchdog.run())
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert watchdog.cause is None


# ---------------------------------------------------------------------------------------------- the CLI


def test_expected_failures_get_an_exit_status_and_bugs_keep_their_traceback():
    assert expected_failure_code(BrokerLost("x")) == 3
    assert expected_failure_code(NoBrokerFound("x")) == 2
    assert expected_failure_code(BrokerUnreachable("x")) == 2
    assert expected_failure_code(FileNotFoundError(2, "No such file", "t.jsonl")) == 2
    assert expected_failure_code(KeyError("bug")) is None


@pytest.mark.parametrize("command", [["status"], ["tail"], ["produce", "-"], ["worker"], ["export", "--out", "x"],
                                     ["promote", "pb", "1"], ["dlq"], ["diff", "p1.", "p2."]])
def test_without_a_bootstrap_or_a_running_broker_commands_refuse_and_say_how_to_start_one(state, command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"combee {command[0]}: no broker: pass --bootstrap HOST:PORT") and err.count("\n") == 1
    assert "combee broker" in err
    # a throwaway broker only where it is of use: not for a command that reads or acts on a run's topics
    assert ("--embedded" in err) == (command[0] == "worker")
    if command[0] == "worker":
        assert err == f"combee worker: {NO_BROKER_HELP}\n"


@pytest.mark.parametrize("command", [["status"], ["export", "--out", "x"]])
def test_a_stale_broker_record_is_no_broker_and_the_message_says_the_recorded_broker_went_away(state, command, capsys):
    write_record(BrokerRecord.now("127.0.0.1:1", "memory://tansu/", pid=_dead_pid()))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "the `combee broker` recorded at 127.0.0.1:1" in err and "is no longer running" in err
    assert "its topics held in memory are gone" in err and "--embedded" not in err


def test_grace_and_connect_timeout_flags_are_settings():
    args = build_parser().parse_args(["worker", "--broker-loss-grace", "5", "--connect-timeout", "2"])
    settings = settings_from_args(args)
    assert settings.broker_loss_grace_s == 5 and settings.broker_connect_timeout_s == 2
    assert settings_from_args(build_parser().parse_args(["tail"])).broker_loss_grace_s == 60


# ---------------------------------------------------------------------------------------------- bounded stops


async def test_stages_that_do_not_stop_in_time_are_cancelled_and_count_as_stopped():
    from streams.topology.worker import _finish_stages

    async def stuck() -> None:
        await asyncio.sleep(3600)

    async def failing() -> None:
        raise KeyError("a bug")

    tasks = [asyncio.create_task(stuck(), name="stage-stuck"), asyncio.create_task(failing()),
             asyncio.create_task(asyncio.sleep(0))]
    started = time.monotonic()
    outcomes = await _finish_stages(tasks, 0.3)
    assert time.monotonic() - started < 2
    assert tasks[0].cancelled()
    assert outcomes[0] is None and isinstance(outcomes[1], KeyError) and outcomes[2] is None


async def test_work_that_ignores_a_stop_request_is_cancelled_after_the_budget():
    from streams.cli.running import until_stopped

    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, stop.set)
    started = time.monotonic()
    assert await until_stopped(asyncio.sleep(3600), stop, 0.3) is None
    assert time.monotonic() - started < 2
    assert await until_stopped(asyncio.sleep(0, result=7), asyncio.Event(), 0.3) == 7


async def test_a_stage_that_ends_on_its_own_stops_the_worker_with_an_error(monkeypatch):
    from combee_core.settings import CombeeSettings
    from streams.topology import worker
    from streams.topology.stage_context import StageContext

    class Quitter:
        name = "quitter"

        def __init__(self, ctx) -> None:
            self.ctx = ctx

        async def run(self) -> None:
            await asyncio.sleep(0.05)
            raise asyncio.CancelledError  # what aiokafka's consumer.stop() can leave behind

    class Waiter(Quitter):
        name = "waiter"

        async def run(self) -> None:
            await self.ctx.stop.wait()

    monkeypatch.setitem(worker.STAGES, "batch", Quitter)
    monkeypatch.setattr(worker, "STRAY_CANCEL_PAUSE_S", 0.001)  # run again after each, then give up
    monkeypatch.setitem(worker.STAGES, "control", Waiter)
    ctx = StageContext(settings=CombeeSettings.load(env={}), bootstrap="x:1", profile=None, producer=None,
                       stop=asyncio.Event())
    with pytest.raises(worker.StageStopped, match=r"stage-quitter stopped before the worker was asked to \(cancelled"):
        await asyncio.wait_for(worker._run_stages(ctx, ["batch", "control"], on_call=None, ready=None,
                                                  readiness=None), 10)
    assert ctx.stop.is_set()


async def test_a_topic_the_broker_refuses_is_a_one_line_error_naming_it_and_the_brokers_reason(monkeypatch):
    """Tansu creates any topic, so its refusals are answered here by a stand-in admin client (Kafka's response
    shape: (name, error code, message))."""
    import contextlib

    from streams.broker import admin
    from streams.broker.errors import TopicCreationError

    class RefusingAdmin:
        async def create_topics(self, topics):
            return type("Response", (), {"topic_errors": [(topics[0].name, 36, None), (topics[1].name, 37, "3 > 1")]})

    @contextlib.asynccontextmanager
    async def refusing(bootstrap, connection):
        yield RefusingAdmin()

    monkeypatch.setattr(admin, "_admin", refusing)
    with pytest.raises(TopicCreationError) as refused:
        await admin.create_topics("127.0.0.1:1", {"run.exists": 1, "run.traces": 4})
    # an existing topic (36) is fine; the refused one is named with the broker's error and message
    assert str(refused.value) == "the broker refused to create run.traces: InvalidPartitionsError (37) 3 > 1"
    assert expected_failure_code(refused.value) == 2  # one line and exit 2, not a traceback


def test_info_lines_that_differ_only_in_their_arguments_are_all_shown():
    """A rebalance logs `%s: owns %s` for every stage: each line tells who owns what, none is a flood."""
    limit = RepeatedLogLimit(burst=1, window_s=30, clock=lambda: 0.0)
    owns = [_record("%s: owns %s", stage, "t.x[0]", name="streams.topology.runtime", level=logging.INFO)
            for stage in ("reflect", "batch", "reduce")]
    assert all(limit.filter(record) for record in owns)
    assert not limit.filter(_record("%s: owns %s", "batch", "t.x[0]", name="streams.topology.runtime",
                                    level=logging.INFO))  # the same line again
