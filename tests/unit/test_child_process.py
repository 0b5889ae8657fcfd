"""Child servers (the embedded broker, the local model server) and their logs."""

from __future__ import annotations

import sys
import time

import pytest

from streams.broker.child_process import LoggedChild
from streams.broker.errors import BrokerStartError
from streams.broker.tansu import EmbeddedBroker


def test_a_child_that_exits_leaves_its_code_and_output_in_the_log():
    child = LoggedChild("combee-test-")
    child.spawn([sys.executable, "-c", "print('hello from the child'); raise SystemExit(3)"], "child.log")
    deadline = time.monotonic() + 10
    while child.exit_code() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.exit_code() == 3 and not child.running
    assert "hello from the child" in child.log_tail()
    log_dir = child.log_path.parent
    child.cleanup()
    assert not log_dir.exists()


def test_stop_ends_a_running_child_and_is_idempotent(tmp_path):
    child = LoggedChild("combee-test-", log_dir=tmp_path)
    child.spawn([sys.executable, "-c", "import time; time.sleep(60)"], "sleeper.log")
    assert child.running and child.pid
    child.stop(timeout_s=5)
    assert not child.running and child.pid is None
    child.stop()
    child.cleanup()
    assert (tmp_path / "sleeper.log").exists()  # a given log dir is kept


def test_a_broker_binary_that_dies_at_start_is_reported_with_its_log(tmp_path):
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'cannot bind: address in use' >&2\nexit 7\n")
    fake.chmod(0o755)
    broker = EmbeddedBroker(port=1, binary=fake, startup_timeout_s=5)
    with pytest.raises(BrokerStartError, match=r"exited with code 7(.|\n)*cannot bind"):
        broker.start()
    assert not broker.running
    broker.cleanup()
