#!/usr/bin/env python3
"""Publish agent traces to Combee Streams with confluent-kafka (librdkafka), validated against the JSON Schema.

Deliberately independent of the combee packages: it only needs ``confluent-kafka`` and ``jsonschema``, and reads
the published schema ``schemas/trace.v1.json``. See ``docs/protocol.md`` for the wire contract it follows.

    python producer.py --bootstrap localhost:9092 --file traces.jsonl
    python producer.py --bootstrap localhost:9092 --generate 10 --playbook support-bot

Valid traces are sent to ``<prefix>traces``, keyed by ``playbook_id``, with the header ``schema_version: 1``;
invalid ones are reported on stderr (line number and what is wrong) and not sent. Prints a JSON summary on stdout.
Exit status: 0 all sent, 1 some traces were rejected (the valid ones were still sent), 2 delivery failed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
from confluent_kafka import KafkaException, Producer
from kafka_security import security_config  # a sibling module: run this file as a script

DEFAULT_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "trace.v1.json"
MAX_MESSAGE_BYTES = 1_048_576  # the reflector dead-letters larger traces (docs/protocol.md)


def _is_rfc3339(value: object) -> bool:
    """``date-time`` as JSON Schema means it: RFC 3339, with a time zone."""
    if not isinstance(value, str):
        return True
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value.upper() and parsed.tzinfo is not None


def trace_validator(schema_path: Path) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    formats = jsonschema.FormatChecker()
    formats.checks("date-time")(_is_rfc3339)
    return jsonschema.Draft202012Validator(schema, format_checker=formats)


def problems(validator: jsonschema.Draft202012Validator, trace: object) -> list[str]:
    """Every way ``trace`` breaks the schema, as ``field.path: message`` strings (empty when valid)."""
    found = []
    for error in sorted(validator.iter_errors(trace), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "<root>"
        found.append(f"{where}: {error.message}")
    return found


def read_jsonl(path: str) -> Iterator[tuple[int, str]]:
    source = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with source:
        for number, line in enumerate(source, start=1):
            if line.strip():
                yield number, line


def generate(count: int, playbook_id: str, seed: int) -> Iterator[tuple[int, str]]:
    """``count`` made-up traces of a small arithmetic task, as JSON lines."""
    rng = random.Random(seed)
    for i in range(count):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        correct = rng.random() < 0.6
        answer = a * b if correct else a * b + rng.choice([-10, -1, 1, 10])
        trace = {
            "schema_version": 1,
            "trace_id": f"rdk-{uuid.UUID(int=rng.getrandbits(128))}",
            "playbook_id": playbook_id,
            "playbook_version": 0,
            "agent_id": f"librdkafka-agent-{i % 3}",
            "task_id": f"multiply-{a}-{b}",
            "input": f"What is {a} * {b}?",
            "output": str(answer),
            "feedback": "correct" if correct else f"wrong: expected {a * b}; carry digits when multiplying",
            "score": 1.0 if correct else 0.0,
            "success": correct,
            "steps": [{"role": "assistant", "content": f"{a} * {b} = {answer}", "tool": None}],
            "metadata": {"client": "librdkafka"},
            "created_at": datetime.now(timezone.utc).isoformat(),
        }
        yield i + 1, json.dumps(trace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default="combee.", help="topic prefix of the Combee run (default combee.)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", help="JSONL file of traces, or - for stdin")
    source.add_argument("--generate", type=int, metavar="N", help="make up N traces instead")
    parser.add_argument("--playbook", default="demo", help="playbook_id of generated traces")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated traces")
    parser.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="trace JSON Schema")
    args = parser.parse_args(argv)

    validator = trace_validator(args.schema)
    lines = read_jsonl(args.file) if args.file else generate(args.generate, args.playbook, args.seed)
    topic = f"{args.prefix}traces"
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        **security_config(),  # TLS/SASL from the COMBEE_KAFKA_* variables (kafka_security.py)
        "acks": "all",
        "enable.idempotence": False,  # Tansu cannot; Kafka does not need it (trace_id makes resends harmless)
        "partitioner": "murmur2_random",  # same partition for a key as the Java and Python (aiokafka) producers
        "message.max.bytes": 2 * MAX_MESSAGE_BYTES,
        "linger.ms": 5,
    })
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(f"{message.key()!r}: {error}")

    sent: list[str] = []
    rejected = 0
    for number, line in lines:
        where = f"line {number}" if args.file else f"trace {number}"
        try:
            trace = json.loads(line)
        except json.JSONDecodeError as error:
            print(f"{where}: rejected: invalid JSON: {error}", file=sys.stderr)
            rejected += 1
            continue
        found = problems(validator, trace)
        payload = line.strip().encode("utf-8")
        if not found and len(payload) > MAX_MESSAGE_BYTES:
            found = [f"<root>: {len(payload)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"]
        if found:
            print(f"{where}: rejected: does not match {args.schema.name}: {'; '.join(found[:5])}", file=sys.stderr)
            rejected += 1
            continue
        producer.produce(topic, value=payload, key=trace["playbook_id"].encode("utf-8"),
                         headers=[("schema_version", b"1")], on_delivery=delivered)
        producer.poll(0)
        sent.append(trace["trace_id"])
    try:
        remaining = producer.flush(30)
    except KafkaException as error:
        print(f"delivery failed: {error}", file=sys.stderr)
        return 2
    if remaining or failures:
        print(f"delivery failed for {remaining + len(failures)} trace(s): {failures[:3]}", file=sys.stderr)
        return 2
    print(json.dumps({"topic": topic, "sent": sent, "rejected": rejected}))
    print(f"sent {len(sent)} trace(s) to {topic}; rejected {rejected}", file=sys.stderr)
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
