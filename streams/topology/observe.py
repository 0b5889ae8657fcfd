"""Watching a run: ``combee tail`` (versions as they arrive) and ``combee status`` (topics, lag, versions)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.batch.chain_pacing import batches_waiting
from combee_core.control.controller import explain_decision
from combee_core.log_order import ContiguousNumbers, valid_manifests, valid_versions
from combee_core.models import BatchManifest, ControlDecision, DeadLetter, PlaybookVersion, PromotionDecision, utc_now
from combee_core.playbook.outcomes import credit
from combee_core.promote.promotion import PromotionLedger
from combee_core.serve.review import review_marks, review_on
from combee_core.settings import CombeeSettings
from combee_core.topology import STAGES, TOPICS, Topic, enabled
from streams.broker.admin import close_client
from streams.broker.connection import client_kwargs
from streams.broker.profile import BrokerProfile
from streams.topology.readable import readable
from streams.topology.tail_follow import Counts, follow_lines
from streams.topology.tail_review import review_so_far
from streams.topology.topic_reader import TopicReader


def describe_version(version: PlaybookVersion, marks: Mapping[str, str] | None = None) -> str:
    """One paragraph on a version: what changed and the stats; with ``marks`` (review mode,
    ``combee_core.serve.review.review_marks``) each added or changed entry says where review stands on it."""
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
            mark = f"  ({marks[entry.entry_id]})" if marks and entry.entry_id in marks else ""
            if op.op != "ADD":
                lines.append(f"  ~ [{applied.entry_id}] {entry.content}{mark}")
            elif entry.created_version == version.version:
                lines.append(f"  + [{applied.entry_id}] {entry.content}{mark}")
            else:  # an ADD folded into an existing near-duplicate entry: reinforced, not added
                lines.append(f"  = [{applied.entry_id}] helpful {entry.helpful}, outcome "
                             f"{credit(entry.outcome, version.baseline).describe()} (ADD merged: {applied.reason})")
        elif op.op == "DELETE":
            lines.append(f"  - [{op.entry_id}]")
    if marks is not None:
        served = sum(not mark.endswith("withheld from agents") for mark in marks.values())
        lines.append(f"  review: agents get {served} of {len(version.entries)} entries "
                     f"({sum(m.startswith('awaiting review') for m in marks.values())} awaiting review)")
    return "\n".join(lines)


def describe_decision(decision: PromotionDecision) -> str:
    """One line on a promotion decision: what is served now, and why."""
    about = f" on candidate v{decision.candidate_version}" if decision.candidate_version is not None else ""
    line = (f"{decision.playbook_id} decision {decision.decision_id}: {decision.action}{about} -> serving "
            f"v{decision.served_version} (was v{decision.previous_version}) by {decision.by}: {decision.reason}")
    cost = decision.cost
    if cost is not None and cost.cost_usd_per_point is not None:
        line += (f" [+{cost.gain_points:.1f} points for {cost.traces} traces, {cost.llm_calls} LLM calls, "
                 f"${cost.cost_usd:.4f}: ${cost.cost_usd_per_point:.5f} per point]")
    return line


async def tail_versions(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    *,
    playbook_id: str | None = None,
    limit: int | None = None,
    stop: asyncio.Event | None = None,
    out: TextIO,
    promoted: bool = False,
    on_following: Callable[[str], None] | None = None,
) -> int:
    """Print every version (from the beginning of the topic), then new ones as they arrive. With ``promoted``,
    every promotion decision instead, with the served version when the pointer moves (``limit`` counts those).
    ``on_following(topic)`` is called once the consumer reads the topic."""
    stop = stop or asyncio.Event()
    review = await review_so_far(settings, bootstrap, profile) if settings.review_playbooks else None

    def described(version: PlaybookVersion) -> str:
        if review is None or not review_on(settings.review_playbooks, version.playbook_id):
            return describe_version(version)
        return describe_version(version, review_marks(version.playbook_id, version.entries, review.book))

    if promoted:
        ledger = PromotionLedger()

        def decision_lines(record: ConsumerRecord, counts: Counts) -> list[str]:
            decisions = readable([record], PromotionDecision)
            if not decisions:
                return []
            decision = decisions[0]
            if not counts(decision.playbook_id, ledger.next_id(decision.playbook_id), decision.decision_id):
                return []  # the first record of each decision id counts, and none behind a record read past
            ledger.apply(decision)
            if playbook_id and decision.playbook_id != playbook_id:
                return []
            lines = [describe_decision(decision)]
            if decision.served is not None and decision.served_version != decision.previous_version:
                lines.append(described(decision.served))
            return lines

        return await follow_lines(bootstrap, profile, settings.topic(Topic.PROMOTED), decision_lines, limit=limit,
                                  stop=stop, out=out, on_following=on_following, review=review,
                                  playbook_id=playbook_id)
    gate = ContiguousNumbers[str](start=1)

    def version_lines(record: ConsumerRecord, counts: Counts) -> list[str]:
        versions = readable([record], PlaybookVersion)
        if not versions:
            return []
        version = versions[0]
        if not counts(version.playbook_id, gate.next(version.playbook_id), version.version):
            return []  # a fenced writer's duplicate (the first record of each version counts), or behind a record
            # read past
        gate.accept(version.playbook_id, version.version)
        if playbook_id and version.playbook_id != playbook_id:
            return []
        return [described(version)]

    return await follow_lines(bootstrap, profile, settings.topic(Topic.PLAYBOOK), version_lines, limit=limit,
                              stop=stop, out=out, on_following=on_following, review=review, playbook_id=playbook_id)


@dataclass(frozen=True)
class DeadLetterKind:
    """Dead letters of one stage and reason class (``error_type``), with one example reason."""

    stage: str
    error_type: str
    count: int
    example: str


def dead_letter_breakdown(letters: Iterable[DeadLetter]) -> list[DeadLetterKind]:
    """Dead letters grouped by (stage, error_type), most frequent first; the first reason of each as its example."""
    counts: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], str] = {}
    for letter in letters:
        kind = (letter.stage, letter.error_type)
        counts[kind] += 1
        examples.setdefault(kind, letter.reason)
    return [DeadLetterKind(stage, error_type, count, examples[(stage, error_type)])
            for (stage, error_type), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


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
    controller: dict[str, str] = field(default_factory=dict)
    """playbook -> the controller's latest decision explained (clock, fit, bs*, bounds)"""
    dead_letters: int = 0
    dead_letter_kinds: list[DeadLetterKind] = field(default_factory=list)
    waiting: dict[str, tuple[int, float]] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    """Per playbook, the batches closed and not yet a version (1 + context_lag being built, the others waiting)."""
    context_lag: int = 0
    """playbook -> (traces batched but not yet in a version, age in seconds of the oldest such batch)"""
    stall_warning_s: float = 180.0
    promotion: dict[str, PromotionDecision] = field(default_factory=dict)
    """playbook -> its latest promotion decision (runs with promotion on)"""
    decided: dict[str, int] = field(default_factory=dict)
    """playbook -> newest candidate version decided on"""
    promotion_on: bool = False
    """The run promotes (this command's settings say so, or the promoter has decided on a candidate)."""
    guard: str = ""
    """The guard as this command's settings configure it (``guard_state``)."""


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


STAGE_INPUTS = {stage.name: stage.consumes[0] for stage in STAGES}
"""Each stage's consumer-group input, whose lag ``status`` reports."""
STATUS_READS = (Topic.PLAYBOOK, Topic.BATCHES, Topic.CONTROL, Topic.DLQ, Topic.PROMOTED)
"""Topics ``status`` reads whole (to their ends as measured at the start)."""


async def committed_lag(admin: AIOKafkaAdminClient, group: str, ends: dict[TopicPartition, int]) -> int:
    """Records of ``ends``' partitions that ``group`` has not committed yet."""
    committed = await admin.list_consumer_group_offsets(group, partitions=list(ends))
    done = sum(meta.offset for meta in committed.values() if meta is not None and meta.offset >= 0)
    return max(0, sum(ends.values()) - done)


async def group_members(admin: AIOKafkaAdminClient, group: str) -> int | None:
    """How many members consumer group ``group`` has now (0 for a group that is unknown, empty or dead; None when the
    broker's answer says nothing for sure, e.g. its coordinator is loading)."""
    [response] = await admin.describe_consumer_groups([group])
    for described in response.groups:  # (error_code, group, state, protocol_type, protocol, members[, operations])
        error_code, name, state, members = described[0], described[1], described[2], described[5]
        if error_code == 0 and name == group:
            return 0 if state in ("Empty", "Dead") else len(members)
        if error_code in (-1, 69):  # unknown (Tansu answers -1 for a group it never saw), GROUP_ID_NOT_FOUND
            return 0
    return None


async def collect_status(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> RunStatus:
    """Topics and their sizes, lag of each stage's consumer group, current version and batch size per playbook,
    and the dead letters by stage and reason class.

    One consumer does all the reading: one metadata fetch, the end offsets of every partition in one call, then
    ``playbook``, ``batches``, ``control`` and ``dlq`` read up to those ends; the groups' committed offsets are
    asked for concurrently meanwhile."""
    status = RunStatus(stall_warning_s=settings.stall_warning_s, promotion_on=settings.promotion,
                       context_lag=settings.context_lag)
    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, profile.connection))
    reader = TopicReader(bootstrap, profile, what="the status consumer")
    await asyncio.gather(admin.start(), reader.start())
    try:
        existing = await reader.topics()  # a full metadata fetch: partitions of every topic
        tps_of = {
            spec.name: await reader.partitions(settings.topic(spec.name))
            for spec in TOPICS
            if settings.topic(spec.name) in existing and enabled(spec, settings)  # otlp_spans: only when ingesting
        }  # read before end_offsets() assigns partitions (which narrows the consumer's metadata)
        ends = await reader.end_offsets([tp for tps in tps_of.values() for tp in tps])
        ends_of = {name: {tp: ends[tp] for tp in tps} for name, tps in tps_of.items()}
        for name, tps in tps_of.items():
            status.topics[settings.topic(name)] = len(tps)
            status.end_offsets[settings.topic(name)] = sum(ends_of[name].values())
        stages = [stage for stage, topic in STAGE_INPUTS.items() if tps_of.get(topic)]
        lags = asyncio.gather(*(committed_lag(admin, settings.group(stage), ends_of[STAGE_INPUTS[stage]])
                                for stage in stages))
        wanted = {tp: end for name in STATUS_READS for tp, end in ends_of.get(name, {}).items()}
        read: dict[str, list[ConsumerRecord]] = {tp.topic: [] for tp in wanted}
        for record in await reader.read_to_end(list(wanted), ends=wanted):
            read[record.topic].append(record)
        status.lag = dict(zip(stages, await lags))
        fill_from_records(status, settings, read)
    finally:
        await reader.stop()
        await close_client(admin.close(), "the admin client")
    return status


def fill_from_records(status: RunStatus, settings: CombeeSettings, read: dict[str, list[ConsumerRecord]]) -> None:
    """Versions, batch sizes, waiting batches and dead letters from the records of ``STATUS_READS``."""
    records = {name: read.get(settings.topic(name), []) for name in STATUS_READS}
    for version in valid_versions(readable(records[Topic.PLAYBOOK], PlaybookVersion)):
        status.versions[version.playbook_id] = version.version
    manifests = valid_manifests(readable(records[Topic.BATCHES], BatchManifest))
    for manifest in manifests:
        status.batch_sizes[manifest.playbook_id] = str(manifest.target_batch_size)
    status.waiting = waiting_batches(manifests, status.versions, utc_now())
    for manifest in manifests:
        if manifest.batch_id >= status.versions.get(manifest.playbook_id, 0):
            status.pending[manifest.playbook_id] = status.pending.get(manifest.playbook_id, 0) + 1
    for decision in readable(records[Topic.CONTROL], ControlDecision):
        status.batch_sizes[decision.playbook_id] = f"{decision.batch_size} ({decision.phase})"
        status.controller[decision.playbook_id] = explain_decision(decision)
    ledger = PromotionLedger()
    for promotion in readable(records[Topic.PROMOTED], PromotionDecision):
        ledger.apply(promotion)
    status.promotion = dict(ledger.latest)
    status.decided = {playbook: ledger.last_decided(playbook) for playbook in ledger.playbooks()}
    status.promotion_on = status.promotion_on or any(status.decided.values())  # the promoter has decided
    status.guard = guard_state(settings, status.promotion_on)
    status.dead_letters = status.end_offsets.get(settings.topic(Topic.DLQ), 0)
    status.dead_letter_kinds = dead_letter_breakdown(read_dead_letter(r.value) for r in records[Topic.DLQ])


def read_dead_letter(value: bytes | None) -> DeadLetter:
    """A ``dlq`` record as a :class:`DeadLetter`; one that is not a valid dead letter is shown as such."""
    try:
        return DeadLetter.from_json_bytes(value or b"")
    except (ValueError, ValidationError) as error:
        return DeadLetter(stage="?", reason=f"not a valid dead letter: {str(error)[:200]}",
                          error_type="UnreadableDeadLetter", original_size=len(value or b""), occurred_at=utc_now())


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
    if status.guard:
        lines.append(f"guard: {status.guard}")
    lines.append("playbooks:")
    for playbook in sorted(set(status.versions) | set(status.waiting)):
        line = (f"  {playbook:<30} version {status.versions.get(playbook, 0):<5} "
                f"batch size {status.batch_sizes.get(playbook, '?')}")
        if playbook in status.waiting:
            traces, age = status.waiting[playbook]
            line += f"; {traces} trace(s) batched, not yet in a version (oldest batch {age:.0f} s ago)"
            if playbook in status.pending:
                closed, lag = status.pending[playbook], status.context_lag
                line += f"; batches: {min(closed, 1 + lag)} being built, {batches_waiting(closed, lag)} waiting " \
                        "for the chain"
            if age > status.stall_warning_s:
                line += f" STALLED? (over {status.stall_warning_s:.0f} s)"
        lines.append(line)
        if playbook in status.controller:
            lines.append(f"    controller: {status.controller[playbook]}")
        decision = status.promotion.get(playbook)
        if decision is not None and not status.promotion_on:
            paused = ", PAUSED (agents stay on it) until `combee promote`" if decision.paused else ""
            lines.append(f"    served by the promoted pointer: v{decision.served_version}{paused}")
            lines.append(f"    last decision: {describe_decision(decision)}")
        elif decision is not None:
            newest = status.versions.get(playbook, 0)
            pending = list(range(status.decided.get(playbook, 0) + 1, newest + 1))
            paused = ", automatic promotion PAUSED" if decision.paused else ""
            lines.append(f"    incumbent v{decision.served_version}{paused}; pending candidates: "
                         f"{', '.join(f'v{v}' for v in pending) or 'none'}")
            lines.append(f"    last decision: {describe_decision(decision)}")
    if not status.versions and not status.waiting:
        lines.append("  (no version published yet)")
    lines.append(f"dead letters: {status.dead_letters}")
    lines += format_dead_letter_kinds(status.dead_letter_kinds)
    return "\n".join(lines)


def guard_state(settings: CombeeSettings, promotion: bool = False) -> str:
    """The guard's configuration in one line (``combee_core.guard.rule``), as this command's settings say;
    ``promotion``: the run promotes (its settings, or a promoter's decision on ``promoted``)."""
    if settings.promotion or promotion:
        return "off (promotion is on: the held-out rule gates versions)"
    if not settings.guard:
        return "off (COMBEE_GUARD=0)"
    return (f"on: rolls a version back when its live {settings.guard_metric} is significantly below its parent's "
            f"(mSPRT, alpha {settings.guard_alpha:g}, tau {settings.guard_tau:g}, >= {settings.guard_min_traces} "
            "traces each)")


def format_dead_letter_kinds(kinds: list[DeadLetterKind], example_chars: int = 100) -> list[str]:
    """One line per (stage, reason class) with its count, then an example reason (shortened) under it."""
    lines = []
    for kind in kinds:
        example = " ".join(kind.example.split())
        if len(example) > example_chars:
            example = example[:example_chars - 1] + "…"
        lines.append(f"  {kind.stage:<10} {kind.error_type:<24} {kind.count:>6}")
        lines.append(f"      e.g. {example}")
    return lines
