"""Pure parts of the stream side: safe commit offsets, stage lists, dead letters, trace decoding, CLI settings."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import orjson
import pytest
from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from combee_core import limits
from combee_core.models import DeadLetter, Reflection, utc_now
from combee_core.settings import SettingsError
from streams.broker.profile import BrokerProfile
from streams.cli import build_parser
from streams.cli.flags import settings_from_args
from streams.topology.dead_letters import make_dead_letter, readable_ids
from streams.topology.offsets import OffsetTracker
from streams.topology.stage_context import StageContext
from streams.topology.stages.batch import BatcherStage
from streams.topology.stages.reflect import TraceRejected, decode_trace
from streams.topology.worker import ALL_STAGES, UnknownStageError, parse_stages
from tests.integration.topology_support import make_traces

TP = TopicPartition("t", 0)


def test_commit_stops_below_the_oldest_unfinished_offset():
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.consumed(TP, offset)
    tracker.done(TP, 0)
    tracker.done(TP, 2)
    assert tracker.committable()[TP].offset == 1
    assert tracker.committable() == {}  # nothing new since
    tracker.done(TP, 1)
    assert tracker.committable()[TP].offset == 3
    for offset in (3, 4):
        tracker.done(TP, offset)
    assert tracker.committable()[TP].offset == 5


def test_a_failed_commit_is_offered_again_and_a_revoked_partition_is_forgotten():
    tracker = OffsetTracker()
    tracker.consumed(TP, 0)
    tracker.done(TP, 0)
    offsets = tracker.committable()
    tracker.commit_failed(set(offsets))
    assert tracker.committable()[TP].offset == 1
    tracker.consumed(TP, 1)
    tracker.forget({TP})
    assert tracker.committable() == {}


@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_the_committed_offset_never_passes_an_unfinished_record(finished: list[bool]):
    tracker = OffsetTracker()
    for offset, is_done in enumerate(finished):
        tracker.consumed(TP, offset)
        if is_done:
            tracker.done(TP, offset)
    committed = tracker.committable().get(TP)
    first_unfinished = next((i for i, d in enumerate(finished) if not d), len(finished))
    assert committed is not None and committed.offset == first_unfinished


def test_stage_lists_are_parsed_in_topology_order_and_unknown_names_are_named():
    assert parse_stages(None) == ALL_STAGES == parse_stages("all")
    assert parse_stages("reduce, reflect") == ("reflect", "reduce")
    with pytest.raises(UnknownStageError, match=r"\['reflekt'\].*choose from reflect"):
        parse_stages("reflekt,batch")


def test_dead_letters_keep_text_or_base64_and_say_when_truncated():
    text = make_dead_letter("reflect", "bad", ValueError("x"), b'{"a": 1}', topic="t", offset=3, key=b"pb")
    assert (text.original_text, text.original_base64, text.error_type, text.key) == ('{"a": 1}', None, "ValueError",
                                                                                    "pb")
    binary = make_dead_letter("reflect", "bad", "Custom", b"\xff\x00")
    assert binary.original_text is None and base64.b64decode(binary.original_base64) == b"\xff\x00"
    big = make_dead_letter("reflect", "bad", "Big", b"a" * (5 * 1024 * 1024))
    assert big.truncated and big.original_size == 5 * 1024 * 1024
    assert big.original_text == "a" * limits.MAX_DEAD_LETTER_ORIGINAL_BYTES
    assert big.original_sha256 == hashlib.sha256(b"a" * (5 * 1024 * 1024)).hexdigest()


@pytest.mark.parametrize(
    "original",
    [
        b"\x01" * (3 * 1024 * 1024 // 2),  # every byte a JSON \u0001 escape: 6 bytes each
        b'"' * (5 * 1024 * 1024),  # every byte escaped as \"
        b"\xff" * (5 * 1024 * 1024),  # not UTF-8: base64
        "é".encode() * (1024 * 1024),  # the cut falls inside a 2-byte character
    ],
    ids=["1.5MiB-of-0x01", "5MiB-of-quotes", "5MiB-not-utf8", "2MiB-of-e-acute"],
)
def test_a_dead_letter_is_bounded_whatever_the_original(original):
    huge_key = b"\x02" * 100_000
    letter = make_dead_letter("reflect", "x" * 100_000, "E" * 10_000, original, topic="t", key=huge_key,
                              trace_id="t" * 10_000, playbook_id="pb")
    wire = letter.to_json_bytes()
    assert len(wire) < limits.MAX_DEAD_LETTER_BYTES
    assert letter.original_size == len(original) and letter.truncated
    assert letter.original_sha256 == hashlib.sha256(original).hexdigest()
    kept = letter.original_text.encode() if letter.original_text is not None else base64.b64decode(
        letter.original_base64)
    assert original.startswith(kept) and limits.MAX_DEAD_LETTER_ORIGINAL_BYTES - 4 < len(kept)
    assert (letter.trace_id, letter.playbook_id) == (None, "pb")  # an id over its limit is left out
    assert DeadLetter.from_json_bytes(wire) == letter


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        (b'{"trace_id": "t-1", "playbook_id": "pb", "playbook_version": "three"}', ("t-1", "pb")),
        (b'{"trace_id": 7, "playbook_id": "pb"}', (None, "pb")),
        (b'{"trace_id": "t-\\u00e9", "playbook_id": ', ("t-\u00e9", None)),  # invalid JSON: found by search
        (b'{"trace_id": "big", "input": "' + b"x" * (2 * 1024 * 1024) + b'"}', ("big", None)),
        (b"\xff\xfe", (None, None)),
        (None, (None, None)),
    ],
)
def test_readable_ids_are_found_in_records_that_are_not_valid_traces(raw, ids):
    found = readable_ids(raw)
    assert (found["trace_id"], found["playbook_id"]) == ids


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty message"),
        (b"\xc3\x28", "not valid UTF-8"),
        (b"{nope", "invalid JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'{"trace_id": "a"}', "does not match the Trace schema v1: playbook_id: Field required"),
        (b"x" * 1_048_577, "over the limit of 1048576 bytes"),
    ],
)
def test_bad_trace_bytes_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(TraceRejected, match=reason.replace("(", r"\(")):
        decode_trace(raw)


def test_a_valid_trace_round_trips():
    trace = make_traces(1)[0]
    assert decode_trace(trace.to_json_bytes()) == trace
    assert orjson.loads(trace.to_json_bytes())["schema_version"] == 1


def test_cli_flags_override_the_environment(monkeypatch):
    monkeypatch.setenv("COMBEE_BATCH_SIZE", "12")
    monkeypatch.setenv("COMBEE_P", "3")
    args = build_parser().parse_args(["worker", "--batch-size", "auto", "--model", "openai/x", "--prefix", "a."])
    settings = settings_from_args(args)
    assert settings.auto_batch_size and settings.batch_size == 12 and settings.p == 3
    assert settings.topic_prefix == "a." and settings.reducer_model == "openai/x"


def test_the_dedupe_horizon_comes_from_a_flag_or_the_environment_and_reaches_the_batcher(monkeypatch):
    monkeypatch.setenv("COMBEE_DEDUPE_HORIZON", "7")
    monkeypatch.setenv("COMBEE_BATCH_CLOSE", "size")  # each reflection closes its batch of 1 (no chain pacing)
    assert settings_from_args(build_parser().parse_args(["worker"])).dedupe_horizon == 7
    settings = settings_from_args(build_parser().parse_args(["worker", "--dedupe-horizon", "3", "--batch-size", "1"]))
    assert settings.dedupe_horizon == 3
    context = StageContext(settings=settings, bootstrap="unused:9092", profile=BrokerProfile.for_kind("tansu"),
                           producer=None, stop=asyncio.Event())  # the batcher's state needs no broker
    stage = BatcherStage(context)
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, insights=[],
                              model="sim") for i in range(4)]
    for number, reflection in enumerate(reflections):
        assert stage.batcher.accumulator.add(reflection, float(number), utc_now()) is not None
    assert stage.batcher.accumulator.forgotten("pb") == 1 and not stage.batcher.accumulator.is_duplicate(reflections[0])
    monkeypatch.setenv("COMBEE_DEDUPE_HORIZON", "0")
    with pytest.raises(SettingsError, match="DEDUPE_HORIZON"):
        settings_from_args(build_parser().parse_args(["worker"]))
