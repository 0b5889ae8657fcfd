"""The runtime decodes every input record into the stage's declared model, and every state record it rebuilds from,
in one place: what cannot be read is a dead letter with the stage, the reason and the original bytes."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import BatchMetrics, DeadLetter, ViewCheckpoint
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.topology.runtime import Stage
from streams.topology.stage_context import StageContext
from streams.topology.stage_records import Delivery
from streams.topology.stages.reflect import ReflectorStage
from tests.integration.topology_support import make_traces


def _own(stage: Stage, tp: TopicPartition) -> None:
    """The group assigned ``tp`` and its state is rebuilt: the stage owns it."""
    stage.ownership.assign({tp})
    stage.ownership.begin_restore()
    stage.ownership.end_restore({tp})


class RecordingContext(StageContext):
    """A stage context whose dead letters are kept in a list instead of sent."""

    def __init__(self) -> None:
        super().__init__(settings=CombeeSettings.load(env={}), bootstrap="unused:9092",
                         profile=BrokerProfile.for_kind("tansu"), producer=None, stop=asyncio.Event())
        self.letters: list[DeadLetter] = []

    async def dead_letter(self, letter: DeadLetter) -> None:
        self.count("dead_letters")
        self.letters.append(letter)


class MetricsStage(Stage):
    name = "watch"
    consumes = ("metrics",)
    input_model = BatchMetrics
    input_label = "batch metrics"

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self.handled: list[tuple[int, Any]] = []

    async def handle(self, record: ConsumerRecord, value: Any) -> None:
        self.handled.append((record.offset, value))
        self.done(record)


def _record(offset: int, value: bytes | None, topic: str = "combee.metrics") -> ConsumerRecord:
    return ConsumerRecord(topic=topic, partition=0, offset=offset, timestamp=0, timestamp_type=0, key=b"pb",
                          value=value, checksum=None, serialized_key_size=2,
                          serialized_value_size=len(value or b""), headers=())


def _metrics(batch_id: int) -> bytes:
    return BatchMetrics(playbook_id="pb", batch_id=batch_id, version=batch_id + 1, batch_size=10, k=3,
                        delay_s=1.0, llm_critical_path_s=0.5, llm_calls=4).to_json_bytes()


async def test_a_fetch_is_decoded_once_and_what_cannot_be_read_is_a_dead_letter_that_counts_as_done():
    ctx = RecordingContext()
    stage = MetricsStage(ctx)
    tp = TopicPartition("combee.metrics", 0)
    _own(stage, tp)
    fetch = [_record(0, _metrics(0)), _record(1, b'{"playbook_id": "pb", "batch_id": "one"}'),
             _record(2, b"not json"), _record(3, None), _record(4, _metrics(1))]
    for record in fetch:
        stage.tracker.consumed(tp, record.offset)

    await stage.handle_many(await stage.decode_fetch(fetch))

    assert [(offset, value.batch_id) for offset, value in stage.handled] == [(0, 0), (4, 1)]
    assert all(isinstance(value, BatchMetrics) for _, value in stage.handled)
    assert [(d.stage, d.offset, d.topic) for d in ctx.letters] == [("watch", o, "combee.metrics") for o in (1, 2, 3)]
    assert all(d.reason.startswith("unreadable batch metrics: ") for d in ctx.letters)
    assert "batch_id" in ctx.letters[0].reason and ctx.letters[0].error_type == "ValidationError"
    assert ctx.letters[0].playbook_id == "pb"  # ids are read from the bad bytes where they can be
    assert [d.original_text for d in ctx.letters[:2]] == [fetch[1].value.decode(), "not json"]
    assert ctx.letters[2].original_size == 0
    assert stage.tracker.committable({tp})[tp].offset == 5  # the dead-lettered records do not pin the offset


async def test_records_of_a_partition_revoked_during_the_fetch_are_not_handled():
    stage = MetricsStage(RecordingContext())
    _own(stage, TopicPartition("combee.metrics", 0))
    deliveries = await stage.decode_fetch([_record(0, _metrics(0)), _record(0, _metrics(0), "combee.other")])
    await stage.handle_many(deliveries)
    assert [offset for offset, _ in stage.handled] == [0]


async def test_a_bad_state_record_is_a_dead_letter_with_its_reason_and_the_rebuild_goes_on():
    ctx = RecordingContext()
    stage = MetricsStage(ctx)
    good = ViewCheckpoint(view="watch/metrics", position=3, nexts={}, latest={}, written_at="2026-01-01T00:00:00Z")
    records = [_record(0, b'{"view": "watch/metrics", "position": "far"}', "combee.checkpoints"),
               _record(1, good.to_json_bytes(), "combee.checkpoints")]
    read = [stage.read_state(record, ViewCheckpoint) for record in records]
    await stage.wait_background()
    assert read == [None, good]
    [letter] = ctx.letters
    assert letter.stage == "watch" and letter.offset == 0 and letter.topic == "combee.checkpoints"
    assert letter.reason.startswith("unreadable ViewCheckpoint in combee.checkpoints: ") and "position" in letter.reason
    assert letter.original_text == records[0].value.decode()
    assert ctx.counters["unreadable_state_records"] == 1 and not ctx.stop.is_set()


async def test_the_reflector_reads_traces_strictly_and_its_reasons_say_exactly_what_is_wrong():
    ctx = RecordingContext()
    stage = ReflectorStage(ctx)
    trace = make_traces(1)[0]
    deliveries = await stage.decode_fetch([_record(0, trace.to_json_bytes(), "combee.traces"),
                                           _record(1, b"\xff\xfe", "combee.traces")])
    assert deliveries == [Delivery(deliveries[0].record, trace)]
    [letter] = ctx.letters
    assert letter.stage == "reflect" and letter.reason.startswith("not valid UTF-8")
    assert letter.error_type == "TraceRejected" and letter.original_base64 is not None
