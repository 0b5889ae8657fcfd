"""No SASL password, OAUTHBEARER token or record value in the Kafka client's log lines, at DEBUG included
(streams/broker/log_mask.py)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from aiokafka.protocol.admin import SaslAuthenticateRequest_v0, SaslAuthenticateRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v3

from combee_core.connection import KafkaConnection
from streams.broker.connection import client_kwargs
from streams.broker.log_mask import KafkaLogMask, client_logger_names, mask_value
from tests.hang_guard import SUBPROCESS_HANG_S

PASSWORD = "pl41n-Passw0rd-7c1e"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJl"
TRACE_SECRET = b'{"input": "DB_PASSWORD=Hunter2-Swordfish!", "trace_id": "t-1"}'


@pytest.fixture
def debug_output() -> Iterator[io.StringIO]:
    """Everything aiokafka's loggers emit at DEBUG, as a handler on the root logger sees it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root, client = logging.getLogger(), logging.getLogger("aiokafka")
    saved = (root.level, client.level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    client.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        client.setLevel(saved[1])


def test_every_client_logger_is_masked_once_a_client_is_configured(debug_output):
    client_kwargs("127.0.0.1:9092", KafkaConnection(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                                     sasl_username="alice", sasl_password=PASSWORD))
    client_kwargs("127.0.0.1:9092", KafkaConnection())  # twice: still one mask per logger
    names = client_logger_names()
    assert {"aiokafka", "aiokafka.conn", "aiokafka.producer.producer", "aiokafka.consumer.fetcher"} <= set(names)
    for name in names:
        assert sum(isinstance(f, KafkaLogMask) for f in logging.getLogger(name).filters) == 1, name

    conn = logging.getLogger("aiokafka.conn")  # the lines aiokafka writes, with its own objects
    plain = SaslAuthenticateRequest_v0(b"\0alice\0" + PASSWORD.encode())
    conn.debug("Request to %s:%d %d: %s", "broker", 9092, 3, plain)
    oauth = SaslAuthenticateRequest_v1(f"n,,\x01auth=Bearer {TOKEN}\x01\x01".encode())
    conn.debug("Request to %s:%d %d: %s", "broker", 9092, 4, oauth)
    produce = ProduceRequest_v3(None, -1, 30000, [("combee.traces", [(0, TRACE_SECRET)])])
    conn.debug("Request to %s:%d %d: %s", "broker", 9092, 5, produce)
    logging.getLogger("aiokafka.producer.producer").debug("Sending (key=%s value=%s) to %s", b"pb", TRACE_SECRET, "tp")
    out = debug_output.getvalue()
    assert PASSWORD not in out and TOKEN not in out and "Hunter2" not in out
    assert "SaslAuthenticateRequest_v0(sasl_auth_bytes=<" in out and "ProduceRequest_v3(" in out
    assert "combee.traces" in out and f"value=<{len(TRACE_SECRET)} bytes>" in out  # what happened stays readable


def test_masking_keeps_what_is_not_bytes_and_walks_containers():
    from aiokafka import TopicPartition

    assert mask_value("combee.traces") == "combee.traces" and mask_value(7) == 7
    assert str(mask_value([(0, b"abc"), {"k": bytearray(b"xy")}])) == "[(0, <3 bytes>), {'k': <2 bytes>}]"
    assert str(mask_value({TopicPartition("t", 1): [b"x"]})) == "{TopicPartition(topic='t', partition=1): [<1 bytes>]}"
    assert str(mask_value({b"key": 1})) == "{<3 bytes>: 1}"


def test_the_cli_keeps_aiokafka_at_info_under_combee_log_level_debug(tmp_path):
    """-v or COMBEE_LOG_LEVEL=DEBUG: aiokafka's request lines stay off unless COMBEE_KAFKA_DEBUG (masked either way)."""
    script = ("import logging\nfrom streams.cli import main\n"
              f"main(['schemas', '--check', '--dir', {str(tmp_path)!r}])\n"
              "print('LEVEL', logging.getLogger('aiokafka').level)\n")
    for extra, level in (({}, logging.INFO), ({"COMBEE_KAFKA_DEBUG": "1"}, logging.NOTSET)):
        env = {"COMBEE_LOG_LEVEL": "DEBUG", "PATH": "/usr/bin:/bin", **extra}
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                timeout=SUBPROCESS_HANG_S)
        assert f"LEVEL {level}" in result.stdout, result.stderr[-2000:]
