"""Redaction: the detectors, a trace with personal data in every text field, dead letters, settings, OTLP requests."""

from __future__ import annotations

import base64
import random

import pytest

from combee_core import limits
from combee_core.ingest.detectors import luhn_valid
from combee_core.ingest.redaction import (
    ALL_BUILT_IN,
    RedactionConfig,
    RedactionError,
    Redactor,
    parse_patterns,
    redact_trace,
)
from combee_core.models import DeadLetter, Trace, utc_now
from combee_core.settings import CombeeSettings, SettingsError
from combee_core.sim.task_suite import build_suite, train_traces
from tests.seeded_personal_data import EMPLOYEE_PATTERN, SEEDED, seeded_trace

WITH_USER = RedactionConfig(detectors=parse_patterns(EMPLOYEE_PATTERN) + ALL_BUILT_IN)
BASE = train_traces(build_suite(seed=7), 3, playbook_ids=("pb",), run_seed=0, agents=4)


def text(value: str, config: RedactionConfig = WITH_USER) -> str:
    return Redactor(config).text(value)


@pytest.mark.parametrize(("value", "placeholder"), [
    ("alice@example.com", "[EMAIL]"), ("first.last+tag@mail.example.co.uk", "[EMAIL]"),
    ("+1 415-555-0134", "[PHONE]"), ("(415) 555-0134", "[PHONE]"), ("415.555.0134", "[PHONE]"),
    ("+44 20 7946 0958", "[PHONE]"), ("020 7946 0958", "[PHONE]"), ("+33612345678", "[PHONE]"),
    ("4111 1111 1111 1111", "[CARD]"), ("4111111111111111", "[CARD]"), ("3782-822463-10005", "[CARD]"),
    ("sk-ant-api03-abcdefghijklmnop", "[SECRET]"), ("sk_live_abcdefghijklmnop", "[SECRET]"),
    ("AKIAIOSFODNN7EXAMPLE", "[SECRET]"), ("xoxb-1234567890-abcdef", "[SECRET]"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sgn4tur3", "[SECRET]"), ("EMP-123456", "[EMPLOYEE]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----", "[SECRET]"),
])
def test_each_detector_replaces_its_kind_with_its_placeholder(value, placeholder):
    assert text(f"see {value}, thanks") == f"see {placeholder}, thanks"


@pytest.mark.parametrize(("value", "expected"), [
    ("Authorization: Bearer abcdef0123456789xyz", "Authorization: Bearer [SECRET]"),
    ('{"password": "hunter22", "user": 1}', '{"password": "[SECRET]", "user": 1}'),
    ("api_key=abcdef123456&x=1", "api_key=[SECRET]&x=1"),
    ("postgres://bob:s3cretpw@db:5432/app", "postgres://bob:[SECRET]@db:5432/app"),
])
def test_a_secret_after_its_label_is_replaced_and_the_label_kept(value, expected):
    assert text(value) == expected


@pytest.mark.parametrize("value", [
    "2026-11-25 15:32:15", "version 1.2.3", "ip 192.168.1.10", "str-00001, mis-00012", "12345", "3.14159265",
    "1732545600000", "4111111111111112", "r-3f2a9c0d1e2f3a4b", "sha256 " + "ab" * 32, "the token budget is 8000",
    "[EMAIL] [PHONE] [CARD] [SECRET]", "email-3fa2c9d0e1", "bypass=true", "passenger_count=3", "max_tokens=512",
    "tokenizer: bpe", "sort_key: created_at",
])
def test_ordinary_text_numbers_ids_and_placeholders_are_left_alone(value):
    assert text(value) == value


def test_a_card_shaped_run_inside_a_hex_id_or_digest_is_left_alone():
    """A random OpenTelemetry trace id held a Luhn-valid, card-prefixed run of 16 digits about once in 2,000 ids, and
    the lineage then named a pseudonym instead of the id the client sent (a CI flake of the OTLP door test)."""
    glued = "4111111111111111"
    assert text(f"otel:ab{glued}cd0123456789ab") == f"otel:ab{glued}cd0123456789ab"
    assert Redactor(WITH_USER).identifier(f"otel:{glued}ffffffffffffffff") == f"otel:{glued}ffffffffffffffff"
    assert text(f"card_{glued}, x") == "card_[CARD], x"  # an underscore still parts words, as in labels
    rng = random.Random(0)
    ids = [f"otel:{rng.getrandbits(128):032x}" for _ in range(20_000)]
    assert [i for i in ids if Redactor(WITH_USER).identifier(i) != i] == []


def test_luhn_and_the_card_prefix_are_both_required():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert text("9111111111111111 ok") == "9111111111111111 ok"  # passes Luhn? no network prefix anyway


def test_simulated_traces_pass_unchanged():
    for trace in train_traces(build_suite(seed=3), 300, playbook_ids=("pb",), run_seed=3, agents=20):
        assert redact_trace(trace)[0] == trace


def test_every_text_field_of_a_seeded_trace_is_redacted_ids_stay_valid_unique_and_stable():
    traces = [seeded_trace(BASE[i], i) for i in range(3)]
    redacted = [redact_trace(trace, WITH_USER) for trace in traces]
    for (clean, counts), raw in zip(redacted, traces, strict=True):
        wire = clean.to_json_bytes().decode()
        assert [name for name, value in SEEDED.items() if value in wire] == []
        assert set(counts) == {"EMAIL", "PHONE", "CARD", "SECRET", "EMPLOYEE"}
        assert clean.playbook_id == raw.playbook_id and clean.score == raw.score and clean.created_at == raw.created_at
        assert "LESSON[strategies]: confirm the invoice with [EMAIL] or [PHONE]" in clean.feedback
        assert Trace.from_json_bytes(clean.to_json_bytes()) == clean  # still a valid trace
    assert len({clean.trace_id for clean, _ in redacted}) == 3
    assert redact_trace(traces[0], WITH_USER)[0].trace_id == redacted[0][0].trace_id  # a resend dedupes
    salted = RedactionConfig(detectors=WITH_USER.detectors, salt=b"k")
    assert redact_trace(traces[0], salted)[0].trace_id != redacted[0][0].trace_id
    assert redact_trace(redacted[0][0], WITH_USER) == (redacted[0][0], {})  # idempotent


def test_redaction_off_passes_a_trace_unchanged():
    trace = seeded_trace(BASE[0])
    assert redact_trace(trace, RedactionConfig(enabled=False)) == (trace, {})


def test_a_trace_over_a_limit_once_redacted_is_refused_not_cut():
    short = "a@b.cd "  # 7 characters become [EMAIL] + space: 8
    trace = BASE[0].model_copy(update={"input": (short * (limits.MAX_TRACE_TEXT_CHARS // len(short)))})
    with pytest.raises(RedactionError, match="over a limit once redacted: input"):
        redact_trace(trace)


def test_a_dead_letter_keeps_a_redacted_original_or_none_and_a_redacted_reason():
    raw = seeded_trace(BASE[0]).to_json_bytes()[:-1]  # invalid JSON
    letter = DeadLetter(stage="reflect", reason=f"metadata key {SEEDED['email']!r} is too long", error_type="X",
                        original_text=raw.decode(), original_size=len(raw), trace_id=f"t-{SEEDED['email']}",
                        topic="combee.traces", occurred_at=utc_now())
    clean = Redactor(WITH_USER).dead_letter(letter, original=True)
    wire = clean.to_json_bytes().decode()
    assert [name for name, value in SEEDED.items() if value in wire] == []
    assert "[EMAIL]" in clean.reason and clean.original_text is not None and "[CARD]" in clean.original_text
    not_utf8 = b"\xff\xfe" + SEEDED["email"].encode() + b" \x80"
    binary = letter.model_copy(update={"original_text": None,
                                       "original_base64": base64.b64encode(not_utf8).decode()})
    kept = base64.b64decode(Redactor(WITH_USER).dead_letter(binary, original=True).original_base64 or "")
    assert kept == b"\xff\xfe[EMAIL] \x80"  # the bytes that made it unreadable stay, for the operator
    assert Redactor(WITH_USER).raw(not_utf8) == kept


def test_settings_choose_the_detectors_and_user_patterns_and_refuse_bad_ones():
    settings = CombeeSettings.load(env={"COMBEE_REDACT_DETECTORS": "email", "COMBEE_REDACT_PATTERNS": EMPLOYEE_PATTERN})
    config = RedactionConfig.from_settings(settings)
    assert [d.name for d in config.detectors] == ["EMPLOYEE", "EMAIL"]
    assert Redactor(config).text("EMP-123456 a@b.io +1 415-555-0134") == "[EMPLOYEE] [EMAIL] +1 415-555-0134"
    json_config = CombeeSettings.load(env={"COMBEE_REDACT_PATTERNS": '{"TICKET": "T#\\\\d+"}'})
    assert Redactor(RedactionConfig.from_settings(json_config)).text("T#42") == "[TICKET]"
    assert CombeeSettings.load(env={}).redact and not CombeeSettings.load(env={}).redact_before_produce
    for env, said in (({"COMBEE_REDACT_DETECTORS": "email,ssn"}, "REDACT_DETECTORS.*unknown.*ssn"),
                      ({"COMBEE_REDACT_PATTERNS": "lower=x"}, "REDACT_PATTERNS.*upper-case"),
                      ({"COMBEE_REDACT_PATTERNS": "BAD=("}, "REDACT_PATTERNS.*invalid regex"),
                      ({"COMBEE_REDACT_PATTERNS": "EMPTY=x*"}, "REDACT_PATTERNS.*empty string")):
        with pytest.raises(SettingsError, match=said):
            CombeeSettings.load(env=env)
    with pytest.raises(RedactionError):
        parse_patterns("{not json")


def test_an_otlp_request_is_redacted_in_place_but_attribute_keys_kept():
    pytest.importorskip("opentelemetry.proto")
    from combee_core.otlp.request_redaction import redact_message
    from combee_core.otlp.wire import decode_spans, encode_request, proto_messages

    pb = proto_messages()
    request = pb.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, f"chat {SEEDED['email']}"
    attribute = span.attributes.add()
    attribute.key = "gen_ai.prompt"
    attribute.value.string_value = f"card {SEEDED['card']} phone {SEEDED['phone']}"
    nested = span.events.add()
    nested.name = "msg"
    kv = nested.attributes.add().value.array_value.values.add()
    kv.string_value = SEEDED["openai"]
    redactor = Redactor(WITH_USER)
    redact_message(request, redactor)
    encoded = encode_request(request, "otlp_proto")
    assert [name for name, value in SEEDED.items() if value.encode() in encoded] == []
    (decoded,) = decode_spans(encoded)
    assert decoded.attributes["gen_ai.prompt"] == "card [CARD] phone [PHONE]" and decoded.name == "chat [EMAIL]"
    assert redactor.counts == {"EMAIL": 1, "CARD": 1, "PHONE": 1, "SECRET": 1, "EMPLOYEE": 0}


async def test_the_otlp_receiver_and_ingest_otlp_redact_before_producing_when_asked():
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    import asyncio

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from combee_core.otlp.processor import OtlpIngest
    from combee_core.otlp.wire import decode_spans
    from combee_core.processors.effects import Count, Publish
    from streams.ingest.otlp_receiver import OtlpReceiver
    from streams.testing.otel_agent import run_agent, tracer_provider

    memory = InMemorySpanExporter()
    provider = tracer_provider(memory)
    run_agent(provider, seeded_trace(BASE[0]))
    settings = CombeeSettings.load(env={}, otlp_receiver_port=0, redact_before_produce=True,
                                   redact_patterns=EMPLOYEE_PATTERN, otlp_idle_s=0.1, otlp_feedback_wait_s=0.1)
    written: list[tuple[str, bytes]] = []

    async def sink(records):
        written.extend(records)

    async with OtlpReceiver(settings, sink) as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.url)
        await asyncio.to_thread(exporter.export, memory.get_finished_spans())
    assert written and [leaks for _, record in written if (leaks := [n for n, v in SEEDED.items()
                                                                      if v.encode() in record])] == []
    assert receiver.counters["redactions.otlp-receiver.EMAIL"] > 0

    # the ingest stage's own redaction (for spans the Collector wrote raw): its traces carry placeholders only
    raw = CombeeSettings.load(env={}, otlp_idle_s=0.1, otlp_feedback_wait_s=0.1)
    spans = [span for span in memory.get_finished_spans()]
    from combee_core.otlp.wire import encode_request
    from streams.testing.otel_agent import export_request

    record = encode_request(export_request(spans), "otlp_proto")
    for redact, expect_leak in ((True, False), (False, True)):
        ingest = OtlpIngest.from_settings(settings if redact else raw)
        effects = ingest.take(decode_spans(record, "otlp_proto"), "t", 0.0) + ingest.tick(100.0)
        (trace,) = [e.value for e in effects if isinstance(e, Publish)]
        wire = trace.to_json_bytes().decode()
        assert bool([n for n, v in SEEDED.items() if v in wire]) is expect_leak
        assert any(isinstance(e, Count) and e.name == "redactions.ingest-otlp.EMAIL" for e in effects) is redact


def test_redaction_counters_are_a_labelled_metric_family_by_stage_and_type():
    from streams.topology.metrics import LABELLED_COUNTERS, split_counter

    assert split_counter("redactions.reflect.EMAIL") == ("redactions", ("reflect", "EMAIL"))
    assert split_counter("redactions.ingest-otlp.EMPLOYEE_ID") == ("redactions", ("ingest-otlp", "EMPLOYEE_ID"))
    assert LABELLED_COUNTERS["redactions"][0] == "combee_redactions"
