"""``combee status``'s capacity and backlog lines (:mod:`combee_core.control.capacity`), from the tails of the topics.

Per playbook: the traces sent but not yet in a version (those the reflector has not committed, shared among the
playbooks of their partition by how many each sent recently, plus those batched and not yet in a version), the age
of the oldest, the rate in (the records of ``traces`` sent in the last ``backlog_window_s``) and out (the lineages of
that window's versions, between versions), the time to catch up; and the capacity model: the reflector's recent
latency and what it allows per worker, the version chain's batch and its recent versions' cycle. Reads only tails
(the last :data:`TAIL` records of ``traces`` partitions, ``playbook`` and ``llm-calls``) and one record per traces
partition (the oldest not yet reflected).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord

from combee_core.control.backlog import Backlog, rate_between_versions
from combee_core.control.capacity import CapacityModel, median_or_none, rate_until_now, status_backlog, version_cycles
from combee_core.settings import CombeeSettings
from combee_core.topology import REFLECT, Topic
from streams.broker.admin import close_client
from streams.broker.connection import client_kwargs
from streams.broker.profile import BrokerProfile
from streams.topology.topic_reader import TopicReader

TAIL = 1000
"""Records read from the end of each partition for the rates and the latency."""
RECENT_VERSIONS = 8
"""Versions whose cycles (their median) give the version chain's capacity: the current batch size's, not the ramp's."""


@dataclass
class StreamHealth:
    backlogs: dict[str, Backlog] = field(default_factory=dict)
    capacity: dict[str, CapacityModel] = field(default_factory=dict)
    policy: str = "keep"


async def _tail(reader: TopicReader, tp: TopicPartition, start: int, end: int) -> list[ConsumerRecord]:
    """Records [start, end) of one partition."""
    return await reader.read_to_end({tp: start}, ends={tp: end}, deadline_s=10)


async def collect_stream_health(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                                waiting: dict[str, tuple[int, float]]) -> StreamHealth:
    """``waiting``: per playbook, the traces batched and not yet in a version and the oldest batch's age (as
    ``combee status`` found them)."""
    health = StreamHealth(policy=settings.overload_policy)
    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, profile.connection))
    reader = TopicReader(bootstrap, profile, what="the stream-health consumer")
    await admin.start()
    await reader.start()
    try:
        tps = await reader.partitions(settings.topic(Topic.TRACES), refresh=True)
        singles = [tp for name in (Topic.PLAYBOOK, Topic.LLM_CALLS)
                   for tp in await reader.partitions(settings.topic(name)) if tp.partition == 0]
        ends = await reader.end_offsets(tps + singles)
        committed = await admin.list_consumer_group_offsets(settings.group(REFLECT.name), partitions=tps) if tps \
            else {}
        now = time.time()
        sent_times: dict[str, list[float]] = {}
        unreflected: Counter[str] = Counter()
        oldest: dict[str, float] = {}
        for tp in tps:
            done = committed.get(tp)
            position = done.offset if done is not None and done.offset >= 0 else 0
            recent = await _tail(reader, tp, max(0, ends[tp] - TAIL), ends[tp])
            keys = Counter((r.key or b"").decode(errors="replace") for r in recent)
            for record in recent:
                sent_times.setdefault((record.key or b"").decode(errors="replace"), []).append(record.timestamp / 1000)
            first_unread = await _tail(reader, tp, position, min(ends[tp], position + 1))
            for key, count in keys.items():
                unreflected[key] += round((ends[tp] - position) * count / max(1, sum(keys.values())))
                if first_unread:
                    oldest[key] = min(oldest.get(key, now), first_unread[0].timestamp / 1000)
        versions: dict[str, list[dict]] = {}
        reflect_latencies: list[float] = []
        for tp in singles:
            for record in await _tail(reader, tp, max(0, ends[tp] - TAIL), ends[tp]):
                data = orjson.loads(record.value or b"{}")
                if tp.topic == settings.topic(Topic.PLAYBOOK) and isinstance(data, dict):
                    versions.setdefault(str(data.get("playbook_id")), []).append(data)
                elif isinstance(data, dict) and data.get("role") == "reflector" and not data.get("error"):
                    reflect_latencies.append(float(data.get("latency_s") or 0.0))
    finally:
        await reader.stop()
        await close_client(admin.close(), "the admin client")
    latency = median_or_none([x for x in reflect_latencies if x > 0])
    for playbook in sorted(set(sent_times) | set(versions) | set(waiting)):
        if not playbook:
            continue
        ordered = sorted(versions.get(playbook, []), key=lambda v: v.get("version", 0))
        published = [_epoch(v.get("published_at")) for v in ordered]
        lineages = [len(v.get("lineage") or ()) for v in ordered]
        delays = [float((v.get("stats") or {}).get("delay_s") or 0.0) for v in ordered]
        batched, age = waiting.get(playbook, (0, 0.0))
        candidates = ([oldest[playbook]] if playbook in oldest else []) + ([now - age] if batched else [])
        oldest_sent = min(candidates, default=None)
        health.backlogs[playbook] = status_backlog(
            playbook, unreflected[playbook] + batched, oldest_sent, now,
            rate_until_now(sorted(sent_times.get(playbook, [])), now, settings.backlog_window_s),
            rate_between_versions(list(zip(published, lineages, strict=True)), now, settings.backlog_window_s),
            settings.backlog_warning_s, settings.backlog_window_s)
        health.capacity[playbook] = CapacityModel(
            latency, settings.llm_concurrency, settings.llm_concurrency_max,
            lineages[-1] if lineages else None,
            median_or_none(version_cycles(published, delays, settings.context_lag)[-RECENT_VERSIONS:]))
    return health


def _epoch(value: object) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() if value else 0.0


def format_stream_health(health: StreamHealth) -> str:
    """The lines ``combee status`` prints after its report."""
    lines = [f"backlog and capacity (overload_policy={health.policy}; docs/operations.md, 'Capacity and overload'):"]
    for playbook, backlog in sorted(health.backlogs.items()):
        lines.append(f"  {backlog.describe()}")
        lines.append(f"    capacity: {health.capacity[playbook].describe()}")
    if not health.backlogs:
        lines.append("  (no traces yet)")
    return "\n".join(lines)
