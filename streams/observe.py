"""Watching a run: ``combee tail`` (versions as they arrive) and ``combee status`` (topics, lag, versions)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from combee_core.log_order import ContiguousNumbers, valid_manifests, valid_versions
from combee_core.models import BatchManifest, ControlDecision, PlaybookVersion, utc_now
from combee_core.settings import CombeeSettings
from streams.broker import BrokerProfile, close_client
from streams.runtime import consumer_config, end_offsets, read_topic
from streams.topics import TOPICS


def describe_version(version: PlaybookVersion) -> str:
    """One paragraph on a version: what changed and the stats."""
    outcomes = Counter(
        (applied.operation.op if applied.outcome == "applied" else "rejected") for applied in version.operations
    )
    changes = ", ".join(f"{count} {op}" for op, count in sorted(outcomes.items())) or "no operations"
    stats = version.stats
    lines = [
        f"{version.playbook_id} v{version.version} (parent v{version.parent_version}, batch {version.batch_id}): "
        f"{changes}; {len(version.entries)} entries, {stats.playbook_tokens} tokens; "
        f"{len(version.lineage)} traces, k={stats.k}, p={stats.p}, {stats.llm_calls} LLM calls, "
        f"delay {stats.delay_s:.2f}s"
    ]
    entries = {entry.entry_id: entry for entry in version.entries}
    for applied in version.operations:
        op = applied.operation
        if applied.outcome == "rejected":
            lines.append(f"  ! {op.op} rejected: {applied.reason}")
        elif op.op in ("ADD", "UPDATE", "MERGE") and applied.entry_id in entries:
            entry = entries[applied.entry_id]
            if op.op != "ADD":
                lines.append(f"  ~ [{applied.entry_id}] {entry.content}")
            elif entry.created_version == version.version:
                lines.append(f"  + [{applied.entry_id}] {entry.content}")
            else:  # an ADD folded into an existing near-duplicate entry: reinforced, not added
                lines.append(f"  = [{applied.entry_id}] helpful {entry.helpful} (ADD merged: {applied.reason})")
        elif op.op == "DELETE":
            lines.append(f"  - [{op.entry_id}]")
    return "\n".join(lines)


async def tail_versions(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    *,
    playbook_id: str | None = None,
    limit: int | None = None,
    stop: asyncio.Event | None = None,
    out: TextIO,
) -> int:
    """Print every version (from the beginning of the topic), then new ones as they arrive."""
    stop = stop or asyncio.Event()
    topic = settings.topic("playbook")
    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, profile, None))
    await consumer.start()
    printed = 0
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        gate = ContiguousNumbers[str](start=1)
        while not stop.is_set() and (limit is None or printed < limit):
            batch = await consumer.getmany(timeout_ms=250)
            for records in batch.values():
                for record in records:
                    version = PlaybookVersion.from_json_bytes(record.value)
                    if not gate.accept(version.playbook_id, version.version):
                        continue  # a fenced writer's duplicate: the first record of each version counts
                    if playbook_id and version.playbook_id != playbook_id:
                        continue
                    print(describe_version(version), file=out, flush=True)
                    printed += 1
                    if limit is not None and printed >= limit:
                        break
    finally:
        await close_client(consumer.stop(), "the tail consumer")
    return printed


@dataclass
class RunStatus:
    topics: dict[str, int] = field(default_factory=dict)
    """topic -> partitions (missing topics absent)"""
    end_offsets: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    """stage -> records not yet committed by its consumer group"""
    versions: dict[str, int] = field(default_factory=dict)
    batch_sizes: dict[str, str] = field(default_factory=dict)
    """playbook -> batch size of its latest batch, or the controller's latest decision (with its phase)"""
    dead_letters: int = 0
    waiting: dict[str, tuple[int, float]] = field(default_factory=dict)
    """playbook -> (traces batched but not yet in a version, age in seconds of the oldest such batch)"""
    stall_warning_s: float = 180.0


def waiting_batches(
    manifests: list[BatchManifest], versions: dict[str, int], now: datetime
) -> dict[str, tuple[int, float]]:
    """Per playbook with batches not yet in a version: their traces, and the age of the oldest of them."""
    waiting: dict[str, tuple[int, float]] = {}
    for manifest in manifests:
        if manifest.batch_id < versions.get(manifest.playbook_id, 0):
            continue
        traces, age = waiting.get(manifest.playbook_id, (0, 0.0))
        waiting[manifest.playbook_id] = (traces + manifest.n, max(age, (now - manifest.closed_at).total_seconds()))
    return waiting


STAGE_INPUTS = {"reflect": "traces", "batch": "reflections", "aggregate": "shuffle", "reduce": "partials",
                "control": "metrics"}


async def collect_status(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> RunStatus:
    """Topics and their sizes, lag of each stage's consumer group, current version and batch size per playbook."""
    status = RunStatus(stall_warning_s=settings.stall_warning_s)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, profile, None))
    await consumer.start()
    try:
        existing = await consumer.topics()  # a full metadata fetch: partitions of every topic
        partitions_of = {
            settings.topic(spec.name): consumer.partitions_for_topic(settings.topic(spec.name)) or set()
            for spec in TOPICS
            if settings.topic(spec.name) in existing
        }  # read before end_offsets() assigns partitions (which narrows the consumer's metadata)
        for spec in TOPICS:
            name = settings.topic(spec.name)
            if name not in partitions_of:
                continue
            partitions = partitions_of[name]
            status.topics[name] = len(partitions)
            tps = [TopicPartition(name, p) for p in partitions]
            ends = await end_offsets(consumer, profile, tps)
            status.end_offsets[name] = sum(ends.values())
            stage = next((s for s, t in STAGE_INPUTS.items() if t == spec.name), None)
            if stage is not None and tps:
                committed = await admin.list_consumer_group_offsets(settings.group(stage), partitions=tps)
                done = sum(meta.offset for meta in committed.values() if meta is not None and meta.offset >= 0)
                status.lag[stage] = max(0, status.end_offsets[name] - done)
        manifests: list[BatchManifest] = []
        if settings.topic("playbook") in status.topics:
            records = await read_topic(bootstrap, profile, settings.topic("playbook"))
            for version in valid_versions(PlaybookVersion.from_json_bytes(r.value) for r in records):
                status.versions[version.playbook_id] = version.version
        if settings.topic("batches") in status.topics:
            records = await read_topic(bootstrap, profile, settings.topic("batches"))
            manifests = valid_manifests(BatchManifest.from_json_bytes(r.value) for r in records)
            for manifest in manifests:
                status.batch_sizes[manifest.playbook_id] = str(manifest.target_batch_size)
        status.waiting = waiting_batches(manifests, status.versions, utc_now())
        if settings.topic("control") in status.topics:
            for record in await read_topic(bootstrap, profile, settings.topic("control")):
                decision = ControlDecision.from_json_bytes(record.value)
                status.batch_sizes[decision.playbook_id] = f"{decision.batch_size} ({decision.phase})"
        status.dead_letters = status.end_offsets.get(settings.topic("dlq"), 0)
    finally:
        await close_client(consumer.stop(), "the status consumer")
        await close_client(admin.close(), "the admin client")
    return status


def format_status(status: RunStatus) -> str:
    """Plain-text report of a :class:`RunStatus`."""
    lines = ["topics:"]
    for name, partitions in sorted(status.topics.items()):
        lines.append(f"  {name:<40} {partitions:>3} partition(s) {status.end_offsets.get(name, 0):>8} records")
    if not status.topics:
        lines.append("  (none: no worker has run with this prefix)")
    lines.append("lag per stage (records not yet committed):")
    for stage, lag in status.lag.items():
        lines.append(f"  {stage:<10} {lag}")
    lines.append("playbooks:")
    for playbook in sorted(set(status.versions) | set(status.waiting)):
        line = (f"  {playbook:<30} version {status.versions.get(playbook, 0):<5} "
                f"batch size {status.batch_sizes.get(playbook, '?')}")
        if playbook in status.waiting:
            traces, age = status.waiting[playbook]
            line += f"; {traces} trace(s) batched, not yet in a version (oldest batch {age:.0f} s ago)"
            if age > status.stall_warning_s:
                line += f" STALLED? (over {status.stall_warning_s:.0f} s)"
        lines.append(line)
    if not status.versions and not status.waiting:
        lines.append("  (no version published yet)")
    lines.append(f"dead letters: {status.dead_letters}")
    return "\n".join(lines)
