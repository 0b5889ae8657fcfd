#!/usr/bin/env python3
"""Follow the playbook versions Combee Streams serves, with confluent-kafka (librdkafka).

By default reads ``<prefix>promoted`` from the beginning (runs with promotion on: each counting decision's ``served``
is the whole playbook agents should run) and prints one JSON line per decision. With ``--candidates`` reads
``<prefix>playbook`` (every record is a whole playbook, so the newest record of a playbook_id is its newest
candidate) and prints one JSON line per version. No consumer group: every agent reads every
version (a shared group would split the topic between agents). See ``docs/protocol.md``.

    python subscriber.py --bootstrap localhost:9092 --playbook support-bot --max-versions 5

Exit status: 0 when ``--max-versions`` versions were seen (or on Ctrl-C), 3 on ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import jsonschema
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from kafka_security import security_config  # a sibling module: run this file as a script

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
SUPPORTED_SCHEMA_VERSIONS = {1}


def summary(version: dict) -> dict:
    """What a person (or a test) wants to see of a version; the full record has every entry."""
    return {
        "playbook_id": version["playbook_id"],
        "version": version["version"],
        "parent_version": version["parent_version"],
        "batch_id": version["batch_id"],
        "entries": len(version["entries"]),
        "operations": len(version["operations"]),
        "lineage": len(version["lineage"]),
        "content_hash": version["content_hash"],
    }


def decision_summary(decision: dict) -> dict:
    """A promotion decision: what is served now (``version``) and why."""
    served = decision.get("served") or {}
    return {
        "playbook_id": decision["playbook_id"],
        "decision_id": decision["decision_id"],
        "action": decision["action"],
        "version": decision["served_version"],
        "candidate_version": decision.get("candidate_version"),
        "entries": len(served.get("entries", [])),
        "content_hash": served.get("content_hash"),
        "reason": decision["reason"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default="combee.", help="topic prefix of the Combee run (default combee.)")
    parser.add_argument("--playbook", help="only this playbook_id")
    parser.add_argument("--max-versions", type=int, help="exit after this many versions")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds")
    parser.add_argument("--entries", action="store_true", help="also print every entry of each version")
    parser.add_argument("--candidates", action="store_true",
                        help="follow every candidate version (playbook topic) instead of the promoted ones")
    parser.add_argument("--schema", type=Path, help="JSON Schema of the records (default: the topic's)")
    args = parser.parse_args(argv)

    schema = args.schema or SCHEMAS / ("playbook_version.v1.json" if args.candidates else
                                       "promotion_decision.v1.json")
    validator = jsonschema.Draft202012Validator(json.loads(schema.read_text(encoding="utf-8")))
    topic = f"{args.prefix}{'playbook' if args.candidates else 'promoted'}"
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        **security_config(),  # TLS/SASL from the COMBEE_KAFKA_* variables (kafka_security.py)
        "group.id": "unused",  # required by the client; nothing is committed (assign, not subscribe)
        "enable.auto.commit": False,
        "fetch.message.max.bytes": 16 * 1024 * 1024,
    })
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    seen = 0
    latest: dict[str, int] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is not None:
            print(f"cannot read {topic}: {metadata.error}", file=sys.stderr)
            return 2
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(metadata.partitions)])
        print(f"following {topic} ({len(metadata.partitions)} partition(s))", file=sys.stderr)
        while not stopping and (args.max_versions is None or seen < args.max_versions):
            if deadline is not None and time.monotonic() > deadline:
                print(f"timed out after {args.timeout:.0f} s with {seen} version(s)", file=sys.stderr)
                return 3
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(message.error())
            version = json.loads(message.value())
            if version.get("schema_version") not in SUPPORTED_SCHEMA_VERSIONS:
                print(f"skipping a record with schema_version {version.get('schema_version')!r} at offset "
                      f"{message.offset()}: this subscriber understands {sorted(SUPPORTED_SCHEMA_VERSIONS)}",
                      file=sys.stderr)
                continue
            errors = [e.message for e in validator.iter_errors(version)]
            if errors:
                print(f"skipping an invalid version at offset {message.offset()}: {errors[:3]}", file=sys.stderr)
                continue
            if not args.candidates:  # the reading rule on decision ids: only latest+1 counts
                if version["decision_id"] != latest.get(version["playbook_id"], -1) + 1:
                    continue
                latest[version["playbook_id"]] = version["decision_id"]
                if not args.playbook or version["playbook_id"] == args.playbook:
                    print(json.dumps(decision_summary(version)), flush=True)
                    seen += 1
                continue
            # The reading rule (docs/protocol.md): per playbook, only version latest+1 counts; a record with a
            # number already taken was written by a fenced writer and is ignored.
            if version["version"] != latest.get(version["playbook_id"], 0) + 1:
                continue
            latest[version["playbook_id"]] = version["version"]
            if args.playbook and version["playbook_id"] != args.playbook:
                continue
            line = summary(version)
            if args.entries:
                line["entries"] = [f"[{e['section']}] {e['content']}" for e in version["entries"]]
            print(json.dumps(line), flush=True)
            seen += 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
