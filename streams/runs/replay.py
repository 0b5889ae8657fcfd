"""Export a run's topics to an archive, and rerun a recorded run into a fresh namespace (docs/replay.md).

A replay reads the recorded traces, batch manifests and LLM calls (from an archive, or from the run's topics on the
broker), writes the batch plan to ``<new prefix>batch-plan`` (and, from an archive, the recorded calls to
``<new prefix>replay.llm-calls``), starts a worker whose batcher follows the plan and whose LLM roles answer from
the record, sends the selected traces, and waits for every planned version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from combee_core.models import BatchManifest, PlaybookVersion, TaskSetVersion, utc_now
from combee_core.runs.archive import Archive, ArchiveError, ArchiveHeader, ArchiveRecord, write_archive
from combee_core.runs.replay import (
    ReplayError,
    ReplayPlan,
    TraceSelection,
    plan_replay,
    select_traces,
    settings_mismatch,
    trace_identity,
)
from combee_core.settings import CombeeSettings
from combee_core.topology import TOPICS, Topic
from streams.broker.admin import create_topics
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.readable import readable
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ensure_topics

log = logging.getLogger(__name__)

ALL_TOPICS = tuple(spec.name for spec in TOPICS if not spec.foreign)
PLAN_TOPIC = "batch-plan"
RECORDED_CALLS_TOPIC = "replay.llm-calls"
REPLAY_SOURCE_TOPICS = (Topic.TRACES, Topic.BATCHES, Topic.PLAYBOOK, Topic.TASK_SETS)
"""What a replay from the broker reads (the recorded calls are read by the worker from the source's topic; the
held-out task sets are copied to the replay's topics, for its promoter)."""


def run_header(settings: CombeeSettings, topics: Sequence[str]) -> ArchiveHeader:
    """The archive header of a run: its prefix, run id and settings (without the broker address, the connection's
    security settings and the LLM API key: how to reach a broker or a model is not part of the run, and a secret is
    never written, not even masked)."""
    return ArchiveHeader(
        prefix=settings.topic_prefix,
        run_id=settings.run_id,
        settings=settings.model_dump(mode="json", exclude={"kafka_bootstrap", "kafka", "llm_api_key"}),
        topics=list(topics),
        exported_at=utc_now(),
    )


async def read_run(
    settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, topics: Sequence[str] = ALL_TOPICS
) -> Archive:
    """Every record of the given logical topics of a run, as an in-memory archive."""
    unknown = [t for t in topics if t not in ALL_TOPICS]
    if unknown:
        raise ReplayError(f"unknown topic(s) {', '.join(unknown)}; choose from {', '.join(ALL_TOPICS)}")
    records: list[ArchiveRecord] = []
    for name in topics:
        for r in await read_topic(bootstrap, profile, settings.topic(name)):
            records.append(ArchiveRecord.from_kafka(name, r.partition, r.offset, r.timestamp, r.key, r.value,
                                                    list(r.headers or ())))
    return Archive(header=run_header(settings, topics), records=tuple(records))


@dataclass(frozen=True)
class ExportResult:
    path: str
    counts: dict[str, int]


async def export_run(
    settings: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    out: str | os.PathLike[str],
    topics: Sequence[str] = ALL_TOPICS,
) -> ExportResult:
    """Write the run's topics to a JSONL archive (atomically); returns the record count per topic."""
    archive = await read_run(settings, bootstrap, profile, topics)
    write_archive(out, archive.header, archive.records)
    counts = {name: 0 for name in topics}
    for record in archive.records:
        counts[record.topic] += 1
    return ExportResult(path=str(out), counts=counts)


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay. Unset fields keep what the recorded run did."""

    selection: TraceSelection = TraceSelection()
    prefix: str | None = None
    """Topic prefix of the new run (default ``<source prefix>replay-<random>.``)."""
    run_id: str | None = None
    run_seed: int | None = None
    """A different seed: a deliberate change (not checked against the recorded batches)."""
    batch_size: int | None = None
    """Batch by this size (and max_wait) instead of following the recorded batches: a deliberate change."""
    llm_record: Literal["auto", "off", "replay"] = "auto"
    """auto: answer LLM calls from the record when the source holds calls, else call the models."""
    timeout_s: float = 600.0
    on_progress: Callable[[str], None] | None = None
    """Told what the replay does as it goes: its start, then every ``progress_every_s`` the versions so far."""
    progress_every_s: float = 5.0


@dataclass
class ReplayResult:
    settings: CombeeSettings
    """Settings of the new run (its prefix and run id)."""
    plan: ReplayPlan | None
    sent: int
    versions: list[PlaybookVersion]
    dead_letters: int
    llm_record: str
    counters: dict[str, int] = field(default_factory=dict)


def source_settings(archive: Archive) -> CombeeSettings:
    """The recorded run's settings, from the archive header."""
    try:
        # An archive recorded before deterministic merging existed ran every reduce through the reducer call; one
        # recorded before curation by meaning curated lexically.
        recorded = {"deterministic_merge": False, "embedding_model": "none", **archive.header.settings}
        return CombeeSettings.model_validate({**recorded, "kafka_bootstrap": None})
    except ValidationError as error:
        raise ReplayError(f"the archive's run settings are not usable here: {error}") from error


async def replay_archive(
    archive: Archive, bootstrap: str, profile: BrokerProfile, options: ReplayOptions = ReplayOptions()
) -> ReplayResult:
    """Rerun a recorded run from an archive into a fresh namespace on this broker."""
    calls = archive.topic(Topic.LLM_CALLS)
    return await _replay(archive, source_settings(archive), bootstrap, profile, options, recorded_calls=calls)


async def replay_from_topics(
    settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, options: ReplayOptions = ReplayOptions()
) -> ReplayResult:
    """Rerun the run whose topics carry ``settings.topic_prefix`` (its traces topic, selected by ``options``)."""
    archive = await read_run(settings, bootstrap, profile, REPLAY_SOURCE_TOPICS)
    return await _replay(archive, settings, bootstrap, profile, options, calls_topic=settings.topic(Topic.LLM_CALLS))


def replay_run_id(prefix: str) -> str:
    """The new run's default id: its prefix's last part (``combee.replay-84123598.`` -> ``replay-84123598``), so
    its topics and its consumer groups carry the same name."""
    return prefix.rstrip(".").rsplit(".", 1)[-1] or "replay"


def _new_settings(source: CombeeSettings, options: ReplayOptions, prefix: str, follow: bool, llm_record: str,
                  calls_topic: str | None) -> CombeeSettings:
    if prefix == source.topic_prefix:
        raise ReplayError(f"the replay needs a fresh topic prefix, not the recorded run's own ({prefix})")
    values = source.model_dump()
    values.update(
        kafka_bootstrap=None,
        topic_prefix=prefix,
        run_id=options.run_id or replay_run_id(prefix),
        batch_plan_topic=f"{prefix}{PLAN_TOPIC}" if follow else None,
        llm_record=llm_record,
        llm_record_file=None,
        llm_record_topic=calls_topic if llm_record == "replay" else None,
    )
    if options.run_seed is not None:
        values["run_seed"] = options.run_seed
    if options.batch_size is not None:
        values.update(batch_size=options.batch_size, auto_batch_size=False)
    return CombeeSettings.model_validate(values)


async def _replay(
    archive: Archive,
    source: CombeeSettings,
    bootstrap: str,
    profile: BrokerProfile,
    options: ReplayOptions,
    *,
    recorded_calls: Sequence[ArchiveRecord] = (),
    calls_topic: str | None = None,
) -> ReplayResult:
    traces = archive.topic(Topic.TRACES)
    if not traces:
        raise ReplayError(f"the recorded run ({archive.header.prefix}) has no traces to replay")
    manifests = archive.models(Topic.BATCHES, BatchManifest)
    follow = options.batch_size is None
    plan: ReplayPlan | None = None
    if follow:
        if not manifests:
            raise ReplayError("the recorded run has no batch manifests (batches topic) to follow; pass --batch-size "
                              "to batch by size instead")
        if options.run_seed is None:
            mismatch = settings_mismatch(manifests, source.run_seed, source.p)
            if mismatch:
                raise ReplayError(f"the recorded run's settings do not match its batches: {mismatch}. Give the run's "
                                  "seed (--seed, COMBEE_RUN_SEED) and -p")
        plan = plan_replay(traces, manifests, options.selection)
        to_send = list(plan.traces)
        if not plan.manifests:
            raise ReplayError(f"the selection matches {plan.selected} trace record(s) but no recorded batch")
        if plan.unbatched:
            log.warning("%d selected trace(s) were in no recorded batch and are not replayed, e.g. %s",
                        len(plan.unbatched), ", ".join(plan.unbatched[:3]))
    else:
        to_send = select_traces(traces, options.selection)
    if not to_send:
        raise ReplayError("the selection matches no trace record")

    has_calls = bool(recorded_calls) or calls_topic is not None
    if options.llm_record == "auto":
        llm_record = "replay" if has_calls else "off"
    else:
        llm_record = options.llm_record
    if llm_record == "replay" and not has_calls:
        raise ReplayError("--llm-record replay needs recorded calls; the archive has no llm-calls records")
    if llm_record == "replay" and plan is not None and not plan.matches_recording:
        raise ReplayError(f"the selection does not replay whole recorded batches from the first: {plan.mismatch}. "
                          "Those batches make LLM calls the recorded run never made, so the record cannot answer "
                          "them: select whole batches from each playbook's first, or pass --llm-record off to call "
                          "the model")
    prefix = options.prefix or f"{source.topic_prefix}replay-{uuid.uuid4().hex[:8]}."
    copy_calls = bool(recorded_calls) and llm_record == "replay"
    if copy_calls:
        calls_topic = f"{prefix}{RECORDED_CALLS_TOPIC}"
    settings = _new_settings(source, options, prefix, follow, llm_record, calls_topic)

    await ensure_topics(settings, bootstrap, connection=profile.connection)
    extra = {topic: 1 for topic in (settings.batch_plan_topic, calls_topic if copy_calls else None) if topic}
    if extra:
        await create_topics(bootstrap, extra, connection=profile.connection)
    producer = await start_producer(bootstrap, profile)
    try:
        if plan is not None and settings.batch_plan_topic:
            for manifest in plan.manifests:
                await producer.send(settings.batch_plan_topic, manifest.to_json_bytes(),
                                    key=manifest.playbook_id.encode())
        if copy_calls:
            for call in recorded_calls:
                await producer.send(calls_topic, call.value_bytes(), key=call.key_bytes())
        for task_set in archive.models(Topic.TASK_SETS, TaskSetVersion):  # the held-out sets decisions scored on
            await producer.send(settings.topic(Topic.TASK_SETS), task_set.to_json_bytes(), key=task_set.name.encode())
        await producer.flush()
        log.info("replaying %d trace(s) of %s into %s", len(to_send), archive.header.prefix, settings.topic_prefix)
        say = options.on_progress or (lambda line: None)
        say(f"replaying {len(to_send)} trace(s) of {archive.header.prefix} into {settings.topic_prefix} (run id "
            f"{settings.run_id})" + (f", {sum(plan.expected_versions().values())} version(s) expected" if plan
                                     else ""))
        async with InProcessPipeline(settings, bootstrap, profile) as run, _ticking(run, options):
            await _send_traces(producer, settings.topic(Topic.TRACES), to_send)
            if plan is not None:
                expected = plan.expected_versions()
                await run.wait_for(
                    lambda vs: all(sum(v.playbook_id == pb for v in vs) >= n for pb, n in expected.items()),
                    timeout_s=options.timeout_s, what=f"{sum(expected.values())} replayed version(s)",
                )
            else:
                ids = {identity[1] for r in to_send if (identity := trace_identity(r)) is not None}
                await run.wait_for_lineage(ids, timeout_s=options.timeout_s)
            versions = await run.versions()
            if settings.promotion:  # the decisions are part of what a replay reproduces (docs/replay.md)
                await run.wait_decided(versions, timeout_s=options.timeout_s)
            dead = await run.dead_letters()
        return ReplayResult(settings=settings, plan=plan, sent=len(to_send), versions=versions,
                            dead_letters=len(dead), llm_record=llm_record, counters=dict(run.counters))
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def _ticking(run: InProcessPipeline, options: ReplayOptions) -> AsyncIterator[None]:
    """While the body runs, tell ``options.on_progress`` every ``progress_every_s`` how many versions are out."""
    if options.on_progress is None:
        yield
        return
    say, started = options.on_progress, time.monotonic()

    async def tick() -> None:
        while True:
            await asyncio.sleep(options.progress_every_s)
            try:
                say(f"{time.monotonic() - started:.0f} s: {len(await run.versions())} version(s) so far")
            except KafkaError as error:  # the replay's own reads report a broker that is gone
                log.debug("replay progress: could not read the versions: %s", error)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker


async def _send_traces(producer: AIOKafkaProducer, topic: str, records: Sequence[ArchiveRecord]) -> None:
    """Send recorded trace records byte for byte (value, key, headers) and wait for the acks."""
    for record in records:
        await producer.send(topic, record.value_bytes(), key=record.key_bytes(), headers=record.header_bytes())
    await producer.flush()


async def versions_of(run: str, bootstrap: str | None, profile: BrokerProfile | None) -> list[PlaybookVersion]:
    """The versions of a run: an archive path, or a topic prefix on the broker."""
    from combee_core.runs.archive import read_archive

    if os.path.exists(run):
        return read_archive(run).versions()
    if bootstrap is None or profile is None:
        raise ArchiveError(run, [(0, "no such archive file (and no broker to read a topic prefix from)")])
    records = await read_topic(bootstrap, profile, f"{run}playbook")
    return readable(records, PlaybookVersion)
