"""Every reader of topics outside a consumer group goes through streams/topology/topic_reader.py: no other module
builds a group-less consumer or calls aiokafka's private client."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READER = ROOT / "streams" / "topology" / "topic_reader.py"
GROUP_CONSUMER = ROOT / "streams" / "topology" / "runtime.py"  # the stages' consumer-group member
CONSUMER_FACTORY = ROOT / "streams" / "topology" / "gapless_consumer.py"  # builds the consumer both of them use


def _sources() -> list[Path]:
    return [p for d in ("combee_core", "streams", "bench") for p in sorted((ROOT / d).rglob("*.py"))]


def private_client_calls(path: Path, root: Path = ROOT) -> list[str]:
    """``x._client`` attribute uses (aiokafka's private client)."""
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "_client"]


def consumers_built(path: Path, root: Path = ROOT) -> list[str]:
    """``AIOKafkaConsumer(...)`` calls."""
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) ==
            "AIOKafkaConsumer"]


def test_only_the_topic_reader_calls_aiokafkas_private_client():
    found = [hit for path in _sources() if path != READER for hit in private_client_calls(path)]
    assert found == [], "use streams.topology.topic_reader.TopicReader.partitions(refresh=True):\n" + "\n".join(found)


def test_only_the_topic_reader_and_the_stage_runtime_build_consumers():
    found = [hit for path in _sources() if path not in (READER, GROUP_CONSUMER, CONSUMER_FACTORY)
             for hit in consumers_built(path)]
    assert found == [], "read outside a group with streams.topology.topic_reader:\n" + "\n".join(found)


def test_the_scans_find_what_they_look_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("c = AIOKafkaConsumer(**cfg)\nawait c._client.force_metadata_update()\n")
    assert consumers_built(sample, tmp_path) == ["sample.py:1"]
    assert private_client_calls(sample, tmp_path) == ["sample.py:2"]
