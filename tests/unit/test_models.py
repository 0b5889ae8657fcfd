"""Wire models: validation, size limits with clear errors, JSON round trip, schema drift."""

import json
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from combee_core import limits
from combee_core.models import AddOp, AppliedOperation, PlaybookEntry, PlaybookVersion, Trace, VersionStats
from combee_core.schema_export import render_schemas, schema_drift

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"


def make_trace(**changes) -> Trace:
    fields = dict(
        trace_id="t-1",
        playbook_id="pb",
        playbook_version=0,
        agent_id="agent-1",
        task_id="task-1",
        input="2+2?",
        output="5",
        feedback="wrong",
        success=False,
        created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
    fields.update(changes)
    return Trace(**fields)


def test_trace_round_trips_through_json_bytes():
    trace = make_trace(metadata={"used_entries": "a-00001", "n": 3})
    assert Trace.from_json_bytes(trace.to_json_bytes()) == trace


def test_oversized_input_is_rejected_naming_field_and_limit():
    with pytest.raises(ValidationError) as error:
        make_trace(input="x" * (limits.MAX_TRACE_TEXT_CHARS + 1))
    message = str(error.value)
    assert "input" in message and str(limits.MAX_TRACE_TEXT_CHARS) in message


def test_unknown_fields_and_bad_ids_are_rejected():
    with pytest.raises(ValidationError, match="extra"):
        Trace.model_validate({**make_trace().model_dump(), "surprise": 1})
    with pytest.raises(ValidationError, match="playbook_id"):
        make_trace(playbook_id="has space")


def test_long_metadata_value_is_rejected_with_key_name():
    with pytest.raises(ValidationError, match="metadata\\['note'\\]"):
        make_trace(metadata={"note": "x" * (limits.MAX_METADATA_VALUE_CHARS + 1)})


def test_content_hash_ignores_stats_but_not_entries():
    entry = PlaybookEntry(entry_id="gen-00001", section="general", content="check units", created_version=1,
                          updated_version=1)
    ops = [AppliedOperation(operation=AddOp(section="general", content="check units"), outcome="applied",
                            entry_id="gen-00001")]
    h1 = PlaybookVersion.compute_hash("pb", 1, 0, 0, [entry], ops, ["t-1"])
    h2 = PlaybookVersion.compute_hash("pb", 1, 0, 0, [entry.model_copy(update={"helpful": 1})], ops, ["t-1"])
    assert h1 != h2
    version = PlaybookVersion(playbook_id="pb", version=1, parent_version=0, batch_id=0, entries=[entry],
                              next_entry_number=2,
                              operations=ops, lineage=["t-1"], stats=VersionStats(batch_size=1, k=1, p=2, delay_s=3),
                              content_hash=h1, published_at=datetime.now(timezone.utc))
    assert PlaybookVersion.model_validate_json(version.to_json_bytes()).content_hash == h1


def test_checked_in_schemas_match_the_models():
    drift = schema_drift(SCHEMAS_DIR)
    assert drift == [], f"schemas drifted from the models, run `combee schemas`: {drift}"


def test_every_schema_names_its_version_field():
    for name, content in render_schemas().items():
        assert b'"schema_version"' in content, name


WIRE_CASES = [  # (field, value, accepted by the published schema and so by the model)
    ("success", "yes", False),
    ("success", 1, False),
    ("success", True, True),
    ("playbook_version", "3", False),
    ("playbook_version", True, False),
    ("playbook_version", 3, True),
    ("score", "0.5", False),
    ("score", True, False),
    ("score", 1, True),
    ("input", 5, False),
    ("steps", "none", False),
    ("steps", [{"role": "tool", "content": 7}], False),
    ("metadata", {"n": [1]}, False),
    ("metadata", {"flag": True, "n": 3, "x": 0.5, "s": "v", "none": None}, True),
    ("created_at", 1767225600, False),
    ("created_at", "2026-01-01T00:00:00Z", True),
]


@pytest.mark.parametrize(("field", "value", "valid"), WIRE_CASES)
def test_wire_models_are_exactly_as_strict_as_the_published_schema(field, value, valid):
    schema = json.loads((SCHEMAS_DIR / "trace.v1.json").read_text())
    data = {**make_trace().model_dump(mode="json"), field: value}
    assert jsonschema.Draft202012Validator(schema).is_valid(data) is valid
    if valid:
        decoded = Trace.from_json_bytes(json.dumps(data))
        assert decoded.model_dump(mode="json")[field] == (value if field != "created_at" else "2026-01-01T00:00:00Z")
    else:
        with pytest.raises(ValidationError, match=field):
            Trace.from_json_bytes(json.dumps(data))


def test_values_read_back_keep_their_json_types():
    metadata = {"flag": True, "n": 3, "x": 0.5, "s": "3"}
    decoded = Trace.from_json_bytes(make_trace(metadata=metadata).to_json_bytes())
    assert decoded.metadata == metadata and [type(v) for v in decoded.metadata.values()] == [bool, int, float, str]


@pytest.mark.parametrize("value", [None, b"", b"[1]", b"\xff", b'{"trace_id": 3}'])
def test_every_unreadable_record_is_a_value_error_that_stages_dead_letter(value):
    with pytest.raises(ValueError):
        Trace.from_json_bytes(value)


def test_a_validation_error_names_the_field_but_never_quotes_the_value():
    """A record's values may be secrets or personal data; a validation error's text reaches logs and dead letters."""
    secret = "sk-live-4f9a8b7c6d5e4f3a2b1c"
    for bad in ({"trace_id": secret, "unexpected_field": secret}, {"trace_id": 12345, "playbook_id": secret}):
        with pytest.raises(ValidationError) as raised:
            Trace.from_json_bytes(json.dumps(bad).encode())
        assert secret not in str(raised.value) and "12345" not in str(raised.value)
        assert "trace_id" in str(raised.value) or "unexpected_field" in str(raised.value)
