"""The pipeline's readers on a real Tansu whose ``playbook`` log shows a version late: below offsets already read,
after the gapless consumer gave up waiting for it (docs/broker.md). ``combee serve``, ``combee tail`` and a stage's
view of the log (the reducer's, ``NumberedLog``) read it when it comes and count the versions behind it; before, they
stepped over it for good and voided every later version (``combee serve`` served version 1 for good; the reducer's
own next version was "lost" to a record that does not count, so it rebuilt and lost again).

How the late record is made on a real broker: a durable broker (``s3://`` storage) stores each produce as an object
``records/<base offset>.batch`` and answers a fetch with the batches that exist. Version 2's object is taken out of
the bucket before the follower starts and put back once the follower has read version 3 past it: to a reader that is
what Tansu shows when a produce's batch is stored after the next one's (``combee_core.log_order``), here later than
any reader waits (the gapless consumer waits for it GAP_PATIENCE_S, or none when version 3 is already that old: on a
loaded machine)."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from combee_core.log_order import GAP_PATIENCE_S
from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.processors.effects import Publish
from combee_core.serve.late_records import HOLE_GIVE_UP_S
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.durable import DurableBroker
from streams.broker.profile import BrokerProfile
from streams.broker.seaweed import BUCKET
from streams.broker.torn_tails import BucketClient
from streams.serving.served import ServedPlaybooks
from streams.topology.kafka_clients import start_producer
from streams.topology.observe import tail_versions
from streams.topology.views.numbered_log import NumberedLog
from streams.topology.worker import ensure_topics
from tests.integration.durable_support import until

pytestmark = [pytest.mark.integration]

PB = "pb"
PROFILE = BrokerProfile.for_tansu()
READ_PAST_S = GAP_PATIENCE_S + 60.0
"""Until the follower has read version 3 past the missing version 2: the gapless consumer waits GAP_PATIENCE_S at
the hole first; the rest only against a hang (a fetch on an idle durable broker answers in well under a second)."""
FOUND_S = HOLE_GIVE_UP_S + 30.0
"""Until a version put back is served: the follower reads the topic again from the hole at growing pauses, and once
more when it gives the hole up (HOLE_GIVE_UP_S after it opened); the rest only against a hang."""


def _version(n: int) -> PlaybookVersion:
    entry = PlaybookEntry(entry_id="e0", section="tools", content=f"rule {n}", created_version=1, updated_version=n)
    return PlaybookVersion(playbook_id=PB, version=n, parent_version=n - 1, batch_id=n - 1, entries=[entry],
                           next_entry_number=2, operations=[], lineage=[f"t{n}"],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=f"{n:064x}",
                           published_at=datetime.now(timezone.utc))


@dataclass
class LateLog:
    """A durable broker whose ``playbook`` log holds versions 1 and 3, version 2 (offset 1) held back."""

    broker: DurableBroker
    settings: CombeeSettings
    bucket: BucketClient
    held_key: str
    held: bytes

    @property
    def topic(self) -> str:
        return self.settings.topic(Topic.PLAYBOOK)

    def put_back(self) -> None:
        assert self.bucket.put_if_match(self.held_key, self.held, None)

    async def write(self, n: int) -> None:
        producer = await start_producer(self.broker.bootstrap, PROFILE)
        try:
            await producer.send_and_wait(self.topic, _version(n).to_json_bytes(), key=PB.encode())
        finally:
            await producer.stop()


@pytest.fixture
async def late_log(tmp_path, unique_prefix) -> AsyncIterator[LateLog]:
    broker = DurableBroker(tmp_path / "broker")
    await broker.start()
    try:
        settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix, promotion=False)
        await ensure_topics(settings, broker.bootstrap)
        assert broker.storage is not None
        bucket = BucketClient("127.0.0.1", broker.storage.ports["s3"], BUCKET)
        topic = settings.topic(Topic.PLAYBOOK)
        key = f"clusters/tansu_cluster/topics/{topic}/partitions/0000000000/records/{1:020d}.batch"
        log = LateLog(broker, settings, bucket, key, b"")
        for n in (1, 2, 3):
            await log.write(n)  # one produce each: one batch object each
        stored = bucket.get(key)
        assert stored is not None, f"no batch object {key}: the storage layout changed"
        log.held = stored[0]
        bucket.delete(key)
        yield log
    finally:
        await broker.stop()


def _version_served(served: ServedPlaybooks) -> int:
    version = served.served(PB)
    return version.version if version is not None else 0


async def test_combee_serve_serves_a_version_written_late_and_every_version_after_it(late_log):
    served = ServedPlaybooks(late_log.settings, late_log.broker.bootstrap, PROFILE)
    tp = TopicPartition(late_log.topic, 0)
    entering = asyncio.create_task(served.__aenter__())
    try:
        await until(lambda: served.follower.read_to.get(tp, 0) >= 3 or entering.done(), READ_PAST_S,
                    "the follower to read version 3 past the missing version 2")
        late_log.put_back()
        await entering
        assert await served.wait_until(lambda: _version_served(served) == 3, FOUND_S), (
            f"serving v{_version_served(served)} of a log that holds v1, v2, v3")
        await late_log.write(4)
        assert await served.wait_until(lambda: _version_served(served) == 4, FOUND_S), (
            f"serving v{_version_served(served)} after v4 was written")
        assert served.follower.holes() == ()
    finally:
        if not entering.done():
            entering.cancel()
        elif entering.exception() is None:
            await served.__aexit__(None, None, None)


def _read_past(caplog) -> bool:
    """The gapless consumer said it reads on past the missing offset 1."""
    return any("offsets 1 to 1 are missing" in r.getMessage() for r in caplog.records
               if r.name == "streams.broker.gapless_consumer")


async def test_combee_tail_prints_a_version_written_late_and_every_version_after_it(late_log, caplog):
    caplog.set_level(logging.INFO, logger="streams.broker.gapless_consumer")
    out, stop = io.StringIO(), asyncio.Event()
    tailing = asyncio.create_task(tail_versions(late_log.settings, late_log.broker.bootstrap, PROFILE, out=out,
                                                stop=stop, limit=4))
    try:
        await until(lambda: _read_past(caplog) or tailing.done(), READ_PAST_S,
                    "the tail to read version 3 past the missing version 2")
        late_log.put_back()
        await late_log.write(4)
        printed = await asyncio.wait_for(tailing, FOUND_S)
    except TimeoutError:
        printed = -1  # said below with what was printed
    finally:
        stop.set()
        if not tailing.done():
            tailing.cancel()
    heads = [line.split(" (")[0] for line in out.getvalue().splitlines() if line.startswith(PB)]
    assert printed == 4 and heads[:4] == [f"{PB} v{n}" for n in (1, 2, 3, 4)], out.getvalue()


class _Stage:
    """What a view uses of its stage (``streams.topology.views.host.ViewHost``), on the real broker: a reducer's
    ``playbook`` view, unguarded and without checkpoints."""

    name = "reduce"
    spec = None

    def __init__(self, late_log: LateLog) -> None:
        self.settings = late_log.settings
        self.views: list[Any] = []
        self.tasks: list[asyncio.Task] = []
        self.counted: list[str] = []
        self._late_log = late_log
        self.ctx = SimpleNamespace(bootstrap=late_log.broker.bootstrap, profile=PROFILE, count=self.counted.append,
                                   send=self._send)

    async def _send(self, topic: str, key: str, value: bytes, *, wait: bool = False) -> Any:
        producer = await start_producer(self._late_log.broker.bootstrap, PROFILE)
        try:
            return await producer.send_and_wait(self.settings.topic(topic), value, key=key.encode())
        finally:
            await producer.stop()

    def spawn(self, coro: Any, name: str | None = None, *, service: bool = False) -> asyncio.Task:
        self.tasks.append(asyncio.create_task(coro, name=name))
        return self.tasks[-1]

    def read_state(self, record: Any, model: Any) -> Any:
        return model.from_json_bytes(record.value)


async def test_a_stages_view_takes_a_version_written_late_in_log_order_and_its_own_next_version_counts(
        late_log, caplog):
    caplog.set_level(logging.INFO, logger="streams.broker.gapless_consumer")
    stage = _Stage(late_log)
    taken: list[int] = []
    versions = NumberedLog[PlaybookVersion](stage, Topic.PLAYBOOK, lambda version, _: taken.append(version.version))
    await versions.start()
    try:
        await until(lambda: _read_past(caplog), READ_PAST_S, "the view to read version 3 past the missing version 2")
        late_log.put_back()
        written = await asyncio.wait_for(versions.write(Publish(Topic.PLAYBOOK, PB, _version(4), number=(PB, 4))),
                                         FOUND_S)
        assert taken == [1, 2, 3, 4] and written, f"took {taken}; counted {stage.counted}"
        assert "void_versions" not in stage.counted and versions.view.holes() == ()
    finally:
        versions.view.close()
        await asyncio.gather(*stage.tasks, return_exceptions=True)
