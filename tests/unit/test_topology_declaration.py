"""The topology is declared once (combee_core/topology.py) and consistent; every registry that the rest of the code
uses (topic creation, archive validation, schemas, stage bindings, the worker's stage sets, the status view, export)
is that declaration, and no module names a topic by a string literal instead of its constant."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from combee_core import models, topology
from combee_core.runs.archive import TOPIC_MODELS
from combee_core.schema_export import render_schemas
from combee_core.settings import CombeeSettings
from combee_core.topology import STAGES, TOPICS, Topic
from streams.runs import replay
from streams.topology import observe, worker
from streams.topology.topics import topic_configs, topic_partitions

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS_DIR = ROOT / "schemas"


def test_every_topic_is_declared_once_with_its_enum_name():
    assert [spec.topic for spec in TOPICS] == list(Topic), "one TopicSpec per Topic, in the enum's order"
    for spec in TOPICS:
        assert spec.name == spec.topic.value
        assert spec.carries == (spec.model.__name__ if spec.model is not None else spec.foreign)
        assert (spec.model is None) == bool(spec.foreign), f"{spec.name}: a model of ours, or a foreign format"
        assert spec.key, f"{spec.name}: say what its records are keyed by"
    assert topology.topic_spec("llm-calls").model is models.CallRecord
    with pytest.raises(KeyError, match="no topic"):
        topology.topic_spec("trace")


def test_every_stage_reads_and_writes_declared_topics_and_says_so_consistently():
    assert len({stage.name for stage in STAGES}) == len(STAGES)
    for stage in STAGES:
        assert len(stage.consumes) >= 1, f"{stage.name}: a stage is a consumer group over at least one topic"
        for topic in (*stage.consumes, *stage.reads, *stage.produces):
            assert isinstance(topic, Topic), f"{stage.name}: {topic!r} is not a declared topic"
        assert Topic.DLQ in stage.produces, f"{stage.name}: every stage dead-letters what it cannot process"
        assert (Topic.LLM_CALLS in stage.produces) == stage.llm, f"{stage.name}: LLM stages record their calls"
        assert len(set(stage.produces)) == len(stage.produces)
    assert topology.stage_spec("reduce") is topology.REDUCE
    with pytest.raises(KeyError, match="no stage"):
        topology.stage_spec("reducer")


def test_every_topic_is_written_by_a_stage_or_documented_as_external_input():
    for spec in TOPICS:
        assert topology.writers(spec.topic) or spec.external, f"nothing writes {spec.name}"
    assert topology.writers(Topic.TRACES) == ("ingest-otlp",)  # the OTLP door; agents write it directly too
    assert "agents" in topology.topic_spec(Topic.TRACES).external
    consumed = {topic for stage in STAGES for topic in stage.consumes}
    assert Topic.TRACES in consumed
    # promoted is state every reader follows whole; the guard's group consumes it only to own the playbooks
    assert {stage.name for stage in STAGES if Topic.PROMOTED in stage.consumes} == {"guard"}


def test_every_topic_model_has_its_schema_file_and_every_schema_file_a_topic():
    rendered = render_schemas()
    assert set(rendered) == {f"{spec.schema_name}.v1.json" for spec in TOPICS if spec.model is not None}
    assert {path.name for path in SCHEMAS_DIR.glob("*.json")} == set(rendered), "run `combee schemas`"
    assert "call_record.v1.json" in rendered
    assert topology.topic_spec(Topic.PLAYBOOK).schema_name == "playbook_version"


def test_the_registries_are_the_declaration():
    settings = CombeeSettings.load(env={"COMBEE_TOPIC_PREFIX": "t.", "COMBEE_PARTITIONS": "3"})
    partitions = topic_partitions(settings)
    assert partitions == {f"t.{spec.name}": 3 if spec.scaled else 1 for spec in TOPICS if not spec.enabled_by}
    with_otlp = settings.model_copy(update={"otlp_ingest": True, "otlp_topic": "otlp_spans"})
    assert topic_partitions(with_otlp) == {**partitions, "otlp_spans": 3}  # the Collector's topic: no prefix
    assert topic_configs(settings) == {"t.checkpoints": {"cleanup.policy": "compact"}}
    assert not any(spec.state for spec in TOPICS if spec.compacted)  # a state topic is read whole
    assert TOPIC_MODELS == {spec.name: spec.model for spec in TOPICS
                            if spec.topic not in (Topic.TRACES, Topic.OTLP_SPANS)}
    assert replay.ALL_TOPICS == tuple(topic.value for topic in Topic if topic != Topic.OTLP_SPANS)
    assert worker.ALL_STAGES == tuple(stage.name for stage in STAGES)
    assert worker.LLM_STAGES == {"reflect", "aggregate", "reduce"}
    bare = CombeeSettings.load(env={})
    running, off = worker.runnable(worker.ALL_STAGES, bare)
    assert set(off) == {"promote", "evaluate", "ingest-otlp"}
    assert running == [name for name in worker.ALL_STAGES if name not in off]  # in flow order
    promoting = bare.model_copy(update={"promotion": True, "otlp_ingest": True})
    assert set(worker.runnable(worker.ALL_STAGES, promoting)[1]) == {"guard"}
    assert set(worker.runnable(worker.ALL_STAGES, bare.model_copy(update={"guard": False}))[1]) == {
        "promote", "evaluate", "guard", "ingest-otlp"}
    assert observe.STAGE_INPUTS == {stage.name: stage.consumes[0] for stage in STAGES}
    assert set(observe.STATUS_READS) <= set(Topic)
    for name, binding in worker.STAGES.items():
        spec = topology.stage_spec(name)
        assert binding.name == spec.name and tuple(binding.consumes) == spec.consumes, binding
        consumed = topology.topic_spec(spec.consumes[0])  # decoded as declared, or read as bytes where it says so
        assert binding.input_label == consumed.record and binding.input_model in (consumed.model, None), binding
    as_bytes = {name for name, binding in worker.STAGES.items() if binding.input_model is None}
    assert as_bytes == {"promote", "guard", "ingest-otlp"}  # the others' input arrives decoded as declared


def test_a_topic_constant_is_its_name_wherever_a_string_is_expected():
    settings = CombeeSettings.load(env={"COMBEE_TOPIC_PREFIX": "p."})
    assert settings.topic(Topic.LLM_CALLS) == "p.llm-calls" and f"{Topic.EVAL_RESULTS}" == "eval-results"
    assert {"traces": 1}[Topic.TRACES] == 1


TOPIC_NAMES = {topic.value for topic in Topic}
TAKES_A_TOPIC = {"topic", "send", "LogView", "read_models", "models", "require_run_topics"}


def _topic_literals(path: Path, root: Path = ROOT) -> list[str]:
    """``name("traces")``-style calls: a topic name given as a string literal to a function that takes a topic."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func not in TAKES_A_TOPIC:
            continue
        for arg in ast.walk(ast.Tuple(elts=list(node.args), ctx=ast.Load())):
            if isinstance(arg, ast.Constant) and arg.value in TOPIC_NAMES:
                found.append(f"{path.relative_to(root)}:{arg.lineno}: {func}({arg.value!r})")
    return found


def test_no_module_names_a_topic_by_a_string_literal():
    sources = [p for d in ("combee_core", "streams", "bench") for p in sorted((ROOT / d).rglob("*.py"))]
    literals = [hit for path in sources if path.name != "topology.py" for hit in _topic_literals(path)]
    assert literals == [], "use combee_core.topology.Topic constants:\n" + "\n".join(literals)


def test_the_literal_scan_finds_a_literal(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('settings.topic("traces")\nctx.send("dlq", key, letter)\nsettings.topic(Topic.TRACES)\n'
                      'LogView(self, "batches", apply)\nprint("traces")\n')
    assert _topic_literals(sample, tmp_path) == ["sample.py:1: topic('traces')", "sample.py:2: send('dlq')",
                                                 "sample.py:4: LogView('batches')"]


def test_the_protocol_documents_every_topic_as_declared():
    """docs/protocol.md's topic table (the wire contract for other languages) lists exactly the declared topics, each
    with its model and partitioning."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 6:
            rows[cells[0].strip("`")] = (cells[1], cells[3])
    assert set(rows) == {spec.name for spec in TOPICS}
    for spec in TOPICS:
        model, partitions = rows[spec.name]
        assert model.startswith(f"`{spec.carries}`"), (spec.name, model)
        assert partitions == ("scaled" if spec.scaled else "1"), (spec.name, partitions)


def test_each_stage_module_uses_only_the_topics_its_declaration_names():
    """A stage module that sends to, or follows, a topic its StageSpec does not list fails here: the declaration
    (and so status, deploy advice and docs) would be wrong about it."""
    for name, binding in worker.STAGES.items():
        spec = topology.stage_spec(name)
        declared = {*spec.consumes, *spec.reads, *spec.produces}
        path = Path(inspect.getsourcefile(binding))
        used = {Topic[node.attr] for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Topic"}
        assert used <= declared, f"{path.name} uses {sorted(used - declared)}, not in its StageSpec {name!r}"
