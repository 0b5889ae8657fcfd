"""One bad record never stops a stage: on every door (the OTLP/HTTP receiver, the OTLP topic, every topic a stage
consumes), a recursion bomb, a huge field, invalid UTF-8 and a value of the wrong type are a dead letter with the
reason (or a 400 with a one-line reason), and what comes after is still read."""

from __future__ import annotations

import json

import aiohttp
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from combee_core import limits
from combee_core.otlp.assembler import TraceAssembler
from combee_core.otlp.mapping import UnmappableTrace, map_trace
from combee_core.otlp.processor import OtlpIngest
from combee_core.otlp.wire import OtlpDecodeError, OtlpSpan, decode_spans, encode_request
from combee_core.processors.testing import EffectLog
from combee_core.settings import CombeeSettings
from combee_core.sim.task_suite import build_suite, train_traces
from combee_core.topology import STAGES as TOPOLOGY
from combee_core.topology import Topic, topic_spec
from streams.ingest.otlp_receiver import OtlpReceiver
from streams.testing.otel_agent import export_request, run_agent, tracer_provider
from streams.topology.runtime import Stage
from streams.topology.worker import STAGES
from tests.unit.test_stage_decoding import RecordingContext, _record

DEPTH = 100_000  # 200 KB of brackets: far past every JSON reader's nesting limit
ARRAY_BOMB = b"[" * DEPTH + b"]" * DEPTH
OBJECT_BOMB = b'{"a":' * (DEPTH // 5) + b"1" + b"}" * (DEPTH // 5)
HUGE = b'{"trace_id": "t1", "playbook_id": "pb", "input": "' + b"x" * (limits.MAX_MESSAGE_BYTES + 10) + b'"}'
BAD_RECORDS = {
    "recursion bomb (arrays)": ARRAY_BOMB,
    "recursion bomb (objects)": OBJECT_BOMB,
    "recursion bomb in a field": b'{"trace_id": "t1", "playbook_id": "pb", "input": ' + ARRAY_BOMB + b"}",
    "huge field": HUGE,
    "invalid UTF-8": b'{"trace_id": "t1", "playbook_id": "\xff\xfe"}',
    "wrong type (array)": b"[1, 2, 3]",
    "wrong type (field)": b'{"trace_id": ["t1"], "playbook_id": {"id": 1}, "version": "one", "entries": 7}',
    "wrong type (scalar)": b"42",
}
SPAN = b'{"resourceSpans": [{"scopeSpans": [{"spans": [%s]}]}]}'
OTLP_RECORDS = {**BAD_RECORDS,  # the OTLP topic's shapes: unknown fields are ignored there, as OTLP says
                "recursion bomb in a field": b'{"resourceSpans": ' + ARRAY_BOMB + b"}",
                "huge field": SPAN % (b'{"traceId": "' + b"z" * limits.MAX_MESSAGE_BYTES + b'"}'),
                "invalid UTF-8": b'{"resourceSpans": "\xff\xfe"}',
                "wrong type (field)": SPAN % b'{"traceId": 5, "name": {"x": 1}}'}
RUNS = train_traces(build_suite(seed=7), 2, playbook_ids=("pb",), run_seed=3, agents=2)


def _spans(run=RUNS[0]) -> list:
    exporter = InMemorySpanExporter()
    run_agent(tracer_provider(exporter), run)
    return exporter.get_finished_spans()


@pytest.mark.parametrize("stage_name", list(STAGES))
@pytest.mark.parametrize("what", list(BAD_RECORDS))
async def test_every_stage_dead_letters_a_record_it_cannot_read_with_the_reason_and_goes_on(stage_name, what):
    """Each stage's own decoding (the runtime's, or its stricter one) of its first input topic; a stage whose group
    only gives it ownership reads that topic through a view (``read_state``)."""
    ctx = RecordingContext()
    stage = STAGES[stage_name](ctx)
    topic = ctx.settings.topic(stage.consumes[0])
    raw = (OTLP_RECORDS if stage.consumes[0] == Topic.OTLP_SPANS else BAD_RECORDS)[what]
    record = _record(0, raw, topic)
    if stage.input_model is None and type(stage).decode is Stage.decode:
        assert stage.read_state(record, topic_spec(stage.consumes[0]).model) is None
        await stage.wait_background()
    else:
        assert await stage.decode_fetch([record]) == []
    [letter] = ctx.letters
    assert letter.stage == stage_name and letter.offset == 0 and letter.topic == topic
    assert letter.reason.startswith(("unreadable ", "message is ", "not valid UTF-8", "invalid JSON", "a trace must",
                                     "does not match"))  # the reflector's own reasons, else the runtime's
    assert letter.original_size == len(raw) and not ctx.stop.is_set()


def test_every_consumed_topic_is_covered_by_a_stage_here():
    assert {spec.consumes[0] for spec in TOPOLOGY} <= {cls.consumes[0] for cls in STAGES.values()}


@pytest.mark.parametrize("raw", [
    ARRAY_BOMB, OBJECT_BOMB,
    b'{"resourceSpans": ' + ARRAY_BOMB + b"}",
    b'{"resourceSpans": [1]}', b'{"resourceSpans": "spans"}', b'{"resourceSpans": [{"scopeSpans": [7]}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5, "name": {"x": 1}}]}]}]}',
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
    b'{"resourceSpans": "\xff\xfe"}', b"\x0a\xff\xff\xff\xff\x0f",
], ids=["array bomb", "object bomb", "bomb in a field", "span list of numbers", "string for a list",
        "scope of a number", "wrong id and name types", "wrong time type", "invalid UTF-8", "bad protobuf"])
def test_any_body_that_is_not_an_otlp_request_is_a_decode_error_with_a_one_line_reason(raw):
    with pytest.raises(OtlpDecodeError) as caught:
        decode_spans(raw)
    assert str(caught.value) and "\n" not in str(caught.value)


def _with_attribute(spans: list[OtlpSpan], name: str, value: object) -> list[OtlpSpan]:
    first = spans[0]
    return [OtlpSpan(first.trace_id, first.span_id, first.parent_span_id, first.name, first.start_ns, first.end_ns,
                     {**first.attributes, name: value}, first.events, first.resource), *spans[1:]]


def _decoded() -> list[OtlpSpan]:
    return decode_spans(encode_request(export_request(_spans()), "otlp_proto"))


@pytest.mark.parametrize("name, value", [
    ("gen_ai.input.messages", "[" * DEPTH),  # a JSON-string attribute nested too deeply to read
    ("gen_ai.output.messages", '{"a":' * DEPTH),
    ("combee.playbook.version", [1, 2]),
    ("combee.playbook.id", b"\xff\xfe"),
    ("gen_ai.input.messages", "x" * (4 * limits.MAX_MESSAGE_BYTES)),
])
def test_a_run_whose_spans_cannot_be_mapped_is_refused_with_the_reason_never_raised_otherwise(name, value):
    spans = _with_attribute(_decoded(), name, value)
    try:
        trace = map_trace(spans[0].trace_id, spans)
    except UnmappableTrace as refused:
        assert str(refused).startswith(f"trace {spans[0].trace_id}: ") and "\n" not in str(refused)
    else:  # a huge text is capped to the trace's limit, as docs/protocol.md says
        assert len(trace.input) <= limits.MAX_TRACE_TEXT_CHARS


def test_a_span_time_out_of_range_is_refused_not_raised():
    spans = _decoded()
    first = spans[0]
    shifted = [OtlpSpan(s.trace_id, s.span_id, s.parent_span_id, s.name, 10**30, 10**30, s.attributes, s.events,
                        s.resource) for s in spans]
    with pytest.raises(UnmappableTrace, match="cannot be mapped"):
        map_trace(first.trace_id, shifted)


def test_the_ingest_processor_dead_letters_an_unmappable_run_and_publishes_the_next_one():
    ingest = OtlpIngest(TraceAssembler(idle_s=1.0, feedback_wait_s=0.0, window_s=60.0, max_pending=100))
    bomb = _with_attribute(_decoded(), "gen_ai.input.messages", "[" * DEPTH)
    good = decode_spans(encode_request(export_request(_spans(RUNS[1])), "otlp_proto"))
    log = EffectLog()
    log.extend(ingest.take(bomb, "bomb", 0.0))
    log.extend(ingest.take(good, "good", 0.0))
    log.extend(ingest.tick(100.0))
    [refused] = log.rejected()
    assert "cannot be mapped: RecursionError" in refused.reason and refused.error_type == "UnmappableTrace"
    assert [trace.task_id for trace in log.published(Topic.TRACES)] == [RUNS[1].task_id]
    assert log.settled() == {"bomb": 1, "good": 1}


async def test_the_receiver_answers_400_with_one_line_to_what_it_cannot_read():
    written: list = []

    async def sink(records):
        written.extend(records)

    settings = CombeeSettings.load(env={}, otlp_receiver_port=0)
    bodies = [(b'{"resourceSpans": ' + ARRAY_BOMB + b"}", "application/json"),
              (OBJECT_BOMB, "application/json"),
              (b'{"resourceSpans": [1]}', "application/json"),
              (b'{"resourceSpans": "\xff"}', "application/json"),
              (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5}]}]}]}', "application/json"),
              (b"\x0a\xff\xff\xff\xff\x0f", "application/x-protobuf")]
    good = encode_request(export_request(_spans()), "otlp_json")
    async with OtlpReceiver(settings, sink) as receiver, aiohttp.ClientSession() as http:
        for body, content_type in bodies:
            async with http.post(receiver.url, data=body, headers={"Content-Type": content_type}) as response:
                assert response.status == 400, body[:60]
                if content_type == "application/json":
                    message = json.loads(await response.read())["message"]
                    assert message.startswith("unreadable request: ") and "\n" not in message
        async with http.post(receiver.url, data=good, headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200  # the receiver goes on
    assert len(written) == 1 and receiver.counters["otlp_receiver_status_400"] == len(bodies)


def test_the_readers_of_the_served_topics_skip_what_they_cannot_read_and_go_on():
    """``combee serve``'s follower and the Python client's are no stage (nothing of theirs to dead-letter): a record
    they cannot read is skipped and counted, and the next one is read."""
    from combee_client.follow import ServedFollower
    from combee_core.connection import PLAINTEXT
    from streams.broker.profile import BrokerProfile
    from streams.testing.playbooks import make_version
    from streams.topology.follower import PlaybookFollower

    pipeline = PlaybookFollower(CombeeSettings.load(env={}, review_playbooks="pb"), "", BrokerProfile.for_tansu())
    client = ServedFollower("pb", "t.", False, "agent", "localhost:1", PLAINTEXT)
    topics = (Topic.PLAYBOOK, Topic.PROMOTED, Topic.REVIEW, Topic.CONTROL, Topic.DLQ)
    for topic in topics:
        for raw in BAD_RECORDS.values():
            pipeline._take(topic, raw)
            client._take(topic, raw)
    pipeline._take(Topic.PLAYBOOK, make_version(1).to_json_bytes())
    client._take(Topic.PLAYBOOK, make_version(1).to_json_bytes())
    assert pipeline.latest["pb"].version == 1 and pipeline.unreadable == len(topics) * len(BAD_RECORDS)
    assert client.log_state.latest["pb"].version == 1
