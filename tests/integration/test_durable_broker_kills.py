"""The durable `combee broker` (SeaweedFS + Tansu, data under the state directory) the way it fails, with real
processes: SIGKILL of the whole broker mid-stream while traces are produced and a worker runs, then a restart on the
same state directory; the same with the worker killed at the same moment; the storage process killed alone. The
fault strikes once each playbook has a version, the reflect stage has committed offsets and acknowledged traces are
still on their way (a condition, not a fixed delay). Checked from the topics: every acknowledged trace is in exactly
one version's lineage or a dead letter, versions are contiguous, committed offsets survive (no trace below them is
reflected again), and the served playbook is the last one before the fault or later. Each phase's time is logged
(``--log-cli-level=INFO``) and given with a failed audit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from combee_core.log_order import valid_versions
from combee_core.models import DeadLetter, PlaybookVersion, PromotionDecision, Reflection, Trace
from combee_core.serve.served import ServedLog, served_playbook
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.admin import create_topics
from streams.broker.profile import BrokerProfile
from streams.testing.broker_under_test import ResolvedBroker
from streams.testing.worker_fleet import WorkerFleet, fleet_settings, wait_accounted
from streams.topology.kafka_clients import consumer_config, start_producer
from streams.topology.topic_reader import read_topic
from tests.integration.durable_support import START_S, DurableService, Phases, port_below_the_ephemeral_range, until
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOKS = ("alpha", "beta")
RATE_PER_S = 20.0
FIRST = 20
"""Traces sent at RATE_PER_S first: a first batch for each playbook. Then none until each playbook has a version."""
TRICKLE_S = 0.5
"""Then one trace every TRICKLE_S until the fault's moment (acknowledged traces in flight). Sending on while the first
versions came made ~120 traces by the fault at load 50 (the first versions took 58 s), 150 s of drain after it."""
AFTER_FAULT = 20
"""Traces sent at RATE_PER_S from the fault on (while the broker is away or coming back: sends that fail or are
acknowledged late); the restarted run carries on with them. Fewer traces, shorter drain: each test fed 120 in 6 s
before, and at load 30 working them off after the kill was most of its 4-7 min."""
MAX_TRACES = 1200
"""The feed gives up (the test fails) when the fault's moment has not come within this many traces."""
SETTLE_S = 300.0
"""After the feed: the runs below drained in 20-60 s on 2 cores; five times that before the test gives up."""
WORKER_ENV = {"COMBEE_BROKER_LOSS_GRACE_S": "600", "COMBEE_KAFKA_BROKER_CONNECT_TIMEOUT_S": str(START_S)}
"""The worker waits out the broker's kill, and is started with the broker (it waits for it to answer)."""


class SteadyFeed:
    """Traces of both playbooks, alternately: FIRST at RATE_PER_S; from :meth:`resume`, one every TRICKLE_S; from
    :meth:`stop_after`, that many more at RATE_PER_S (sends in flight while the fault strikes). Few traces, short
    drain after the fault: at load 30 a worker learned ~2 traces/s. A trace is acknowledged when the broker's ack
    arrives (failed sends are not)."""

    def __init__(self, bootstrap: str, settings: CombeeSettings) -> None:
        self.bootstrap, self.settings = bootstrap, settings
        self.acknowledged: set[str] = set()
        self.sent = 0
        self.end = MAX_TRACES
        self._hurry = asyncio.Event()
        self._resumed = asyncio.Event()

    def resume(self) -> None:
        self._resumed.set()

    def stop_after(self, more: int) -> None:
        self.end = min(self.end, self.sent + more)
        self._hurry.set()
        self._resumed.set()

    async def _pause(self) -> None:
        if self.sent < FIRST or self._hurry.is_set():
            await asyncio.sleep(1 / RATE_PER_S)
            return
        await self._resumed.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), TRICKLE_S)

    async def run(self) -> None:
        per_playbook = [make_traces(MAX_TRACES // 2, pb, seed=30 + i) for i, pb in enumerate(PLAYBOOKS)]
        traces = [trace for group in zip(*per_playbook) for trace in group]
        producer = await start_producer(self.bootstrap, BrokerProfile.for_tansu())
        topic = self.settings.topic(Topic.TRACES)
        sends: list[asyncio.Future] = []

        def acked(future: asyncio.Future, trace_id: str) -> None:
            if not future.cancelled() and future.exception() is None:
                self.acknowledged.add(trace_id)

        try:
            while self.sent < self.end:
                trace = traces[self.sent]
                self.sent += 1
                try:
                    future = await producer.send(topic, trace.to_json_bytes(), key=trace.playbook_id.encode())
                except KafkaError:
                    pass  # refused at once (no metadata while the broker was away): never acknowledged
                else:
                    future.add_done_callback(lambda f, trace_id=trace.trace_id: acked(f, trace_id))
                    sends.append(future)
                await self._pause()
            await asyncio.gather(*sends, return_exceptions=True)
        finally:
            await producer.stop()
        assert self.sent < MAX_TRACES, f"the fault's moment did not come within {MAX_TRACES} traces"


async def _committed(bootstrap: str, settings: CombeeSettings) -> dict[int, int | None]:
    """The reflect stage's committed offset of each `traces` partition."""
    consumer = AIOKafkaConsumer(**consumer_config(bootstrap, BrokerProfile.for_tansu(), settings.group("reflect")))
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(settings.topic(Topic.TRACES), p))
                for p in range(settings.partitions)}
    finally:
        await consumer.stop()


async def _learned(bootstrap: str, settings: CombeeSettings) -> tuple[dict[str, int], set[str]]:
    """The newest version of each playbook, and the traces in a version that counts or a dead letter."""
    profile = BrokerProfile.for_tansu()
    records = await read_topic(bootstrap, profile, settings.topic(Topic.PLAYBOOK))
    counted = valid_versions([PlaybookVersion.from_json_bytes(r.value) for r in records])
    dead = await read_topic(bootstrap, profile, settings.topic(Topic.DLQ))
    letters = [DeadLetter.from_json_bytes(r.value) for r in dead]
    covered = {t for v in counted for t in v.lineage} | {d.trace_id for d in letters if d.trace_id is not None}
    return {v.playbook_id: v.version for v in counted}, covered


@dataclass
class Moment:
    """What the topics said just before the fault."""

    newest: dict[str, int]
    """Playbook -> its newest version (each has one: the served playbook must be that one or later)."""
    committed: dict[int, int | None]
    """The reflect stage's committed offset of each `traces` partition (some traces are committed)."""
    in_flight: int
    """Acknowledged traces in no version and no dead letter yet: work the fault interrupts."""


async def _work_in_flight(feed: SteadyFeed, bootstrap: str, settings: CombeeSettings, phases: Phases) -> Moment:
    """Wait until every playbook has a version, the reflect stage has committed offsets and acknowledged traces are
    still on their way through the pipeline: the moment of the fault."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        newest, covered = await _learned(bootstrap, settings)
        committed = await _committed(bootstrap, settings)
        in_flight = len(feed.acknowledged - covered)
        if set(newest) == set(PLAYBOOKS) and any(committed.values()):
            feed.resume()
        if set(newest) == set(PLAYBOOKS) and any(committed.values()) and in_flight:
            phases.mark(f"work in flight ({feed.sent} traces sent, {in_flight} acknowledged and not yet learned)")
            return Moment(newest, committed, in_flight)
        assert time.monotonic() < deadline, f"no version of each playbook within {SETTLE_S} s: {newest}"
        await asyncio.sleep(0.5)


async def _run(tmp_path: Path, prefix: str, fault) -> None:
    """Feed two playbooks' traces to a worker on a fresh durable broker; once each playbook has a version and traces
    are in flight, apply ``fault``; then check the run from its topics."""
    state, logs = tmp_path / "state", tmp_path / "logs"
    logs.mkdir()
    service = DurableService(state, logs, port_below_the_ephemeral_range(random.Random(prefix)))
    broker = ResolvedBroker(service.bootstrap, "tansu", BrokerProfile.for_tansu())
    settings = fleet_settings(prefix)
    fleet = WorkerFleet(broker, prefix, logs, extra_env=WORKER_ENV)
    phases = Phases()
    try:
        fleet.start(1)  # its interpreter starts while the broker does: it waits for the broker to answer
        await service.start()
        phases.mark("broker started")
        await fleet.wait_ready(1, START_S)
        phases.mark("worker ready")
        feed = SteadyFeed(service.bootstrap, settings)
        feeding = asyncio.create_task(feed.run())
        moment = await _work_in_flight(feed, service.bootstrap, settings, phases)
        feed.stop_after(AFTER_FAULT)
        await fault(service, fleet, settings, moment, phases)
        await feeding
        phases.mark(f"feed done ({len(feed.acknowledged)} of {feed.sent} acknowledged)")
        audit = await wait_accounted(settings, broker, fleet, feed.acknowledged, SETTLE_S)
        phases.mark("accounted")
        problems = audit.problems()
        assert not problems, f"{problems}\n{audit}\n{phases}\n{fleet.tail()}\n{service.stderr()[-3000:]}"
        assert audit.learned + audit.dead_lettered == len(feed.acknowledged)
        served = await _served(service.bootstrap, settings)
        assert all(served[pb] >= version for pb, version in moment.newest.items()), (moment.newest, served)
        again = await _reflected_again(service.bootstrap, settings, moment.committed)
        assert not again, f"{len(again)} traces committed before the fault reflected again, e.g. {again[:3]}"
        phases.mark("checked")
    finally:
        for number in list(fleet.processes):
            fleet.kill(number)  # its clean stop is checked elsewhere (test_drain.py); a drain here only takes time
        code = service.stop()
        phases.mark("stopped")
    assert code == 0, service.stderr()[-3000:]
    assert "Traceback" not in service.stderr()


async def _served(bootstrap: str, settings: CombeeSettings) -> dict[str, int]:
    log = ServedLog()
    profile = BrokerProfile.for_tansu()
    for record in await read_topic(bootstrap, profile, settings.topic(Topic.PLAYBOOK)):
        log.take_version(PlaybookVersion.from_json_bytes(record.value))
    for record in await read_topic(bootstrap, profile, settings.topic(Topic.PROMOTED)):
        log.take_decision(PromotionDecision.from_json_bytes(record.value))
    served = {pb: served_playbook(pb, promotion=False, newest=log.latest.get(pb), parents=log.parents.get(pb, {}),
                                  ledger=log.ledger) for pb in PLAYBOOKS}
    return {pb: version.version if version else 0 for pb, version in served.items()}


async def _reflected_again(bootstrap: str, settings: CombeeSettings, committed: dict[int, int | None]) -> list[str]:
    """Traces reflected more often than they were written although every copy of them lies below the reflect stage's
    committed offset read before the fault: what lost offsets would reflect again (those read after it may be
    reflected twice: at least once)."""
    profile = BrokerProfile.for_tansu()
    copies: dict[str, list[bool]] = {}
    for record in await read_topic(bootstrap, profile, settings.topic(Topic.TRACES)):
        below = record.offset < (committed.get(record.partition) or 0)
        copies.setdefault(Trace.from_json_bytes(record.value).trace_id, []).append(below)
    reflected = Counter(Reflection.from_json_bytes(r.value).trace_id
                        for r in await read_topic(bootstrap, profile, settings.topic(Topic.REFLECTIONS)))
    return [t for t, n in reflected.items() if t in copies and all(copies[t]) and n > len(copies[t])]


async def _kill_broker_and_restart(service: DurableService, fleet: WorkerFleet, settings: CombeeSettings,
                                   moment: Moment, phases: Phases, *, worker_too: bool) -> None:
    if worker_too:
        fleet.kill(1)
    await service.kill_all()
    phases.mark("killed")
    await service.start()  # the same address: clients reconnect on their own
    phases.mark("broker restarted")
    after = await _committed(service.bootstrap, settings)
    for partition, offset in moment.committed.items():
        assert offset is None or (after[partition] or 0) >= offset, (partition, moment.committed, after)
    if worker_too:
        fleet.start(1)


async def test_a_killed_broker_restarted_on_its_state_dir_loses_no_acknowledged_trace(tmp_path, unique_prefix):
    async def fault(service, fleet, settings, moment, phases):
        await _kill_broker_and_restart(service, fleet, settings, moment, phases, worker_too=False)

    await _run(tmp_path, unique_prefix, fault)


async def test_broker_and_worker_killed_together_lose_no_acknowledged_trace(tmp_path, unique_prefix):
    async def fault(service, fleet, settings, moment, phases):
        await _kill_broker_and_restart(service, fleet, settings, moment, phases, worker_too=True)

    await _run(tmp_path, unique_prefix, fault)


async def test_a_killed_storage_process_is_restarted_and_nothing_acknowledged_is_lost(tmp_path, unique_prefix):
    async def fault(service, fleet, settings, moment, phases):
        storage_pid = service.record().child_pids["storage"]
        os.kill(storage_pid, signal.SIGKILL)
        phases.mark("killed")
        await until(lambda: "back after" in service.stderr(), START_S, "the storage to be restarted")
        phases.mark("storage restarted")
        await until(lambda: service.record().child_pids["storage"] != storage_pid, 10, "the record of the new pid")
        assert service.process.poll() is None

    await _run(tmp_path, unique_prefix, fault)


async def test_a_write_torn_by_a_kill_is_cut_at_the_next_start_so_readers_reach_the_end(tmp_path):
    """What a kill between Tansu's two steps of a produce leaves (the watermark advanced, the batch never stored),
    made on purpose: the next start cuts it, and a reader reaches the end (before the cut it waited forever)."""
    import json as json_

    from streams.broker.durable import DurableBroker
    from streams.broker.seaweed import BUCKET, SeaweedStorage
    from streams.broker.torn_tails import BucketClient, Repair

    phases = Phases()
    broker = DurableBroker(tmp_path)
    await broker.start()
    phases.mark("started")
    try:
        await create_topics(broker.bootstrap, {"torn.t": 1})
        producer = await start_producer(broker.bootstrap, BrokerProfile.for_tansu())
        for number in range(3):
            await producer.send_and_wait("torn.t", f"r{number}".encode())
        await producer.stop()
        phases.mark("produced")
    finally:
        await broker.stop()
        phases.mark("stopped")
    assert broker.storage is not None
    storage = SeaweedStorage(broker.storage_dir, broker.storage.ports).start()
    phases.mark("storage alone started")
    try:
        client = BucketClient("127.0.0.1", broker.storage.ports["s3"], BUCKET)
        key = "clusters/tansu_cluster/topics/torn.t/partitions/0000000000/watermark.json"
        stored = client.get(key)
        assert stored is not None
        watermark = json_.loads(stored[0])
        assert watermark["high"] == 3
        assert client.put_if_match(key, json_.dumps({**watermark, "high": 4}).encode(), stored[1])
    finally:
        storage.stop()
        phases.mark("storage alone stopped")
    again = DurableBroker(tmp_path)
    await again.start()
    phases.mark("started again")
    try:
        assert again.repairs == [Repair("torn.t/0", 4, 3)]
        records = await read_topic(again.bootstrap, BrokerProfile.for_tansu(), "torn.t", deadline_s=20)
        phases.mark("read")
    finally:
        await again.stop()
        phases.mark("stopped again")
    assert [r.value for r in records] == [b"r0", b"r1", b"r2"]
