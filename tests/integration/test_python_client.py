"""The Python client (combee_client) against a running pipeline on a real broker: it sees each new served version
within seconds, keeps serving the cached one while the broker is stopped, and its reported runs carry the entries
it rendered as ``used_entries`` (which the pipeline then counts on those entries)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timezone

import pytest

from combee_client import CombeeClient, Rendering, ReportNotDelivered
from combee_client.follow import FETCH_MAX_WAIT_MS
from combee_client.runs import USED_ENTRIES
from combee_core.models import PlaybookVersion, PromotionDecision, Trace, VersionStats
from combee_core.settings import CombeeSettings
from combee_core.sim.suite import Task, TaskSuite
from combee_core.sim.task_suite import build_suite, run_task
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.broker.tansu import EmbeddedBroker
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ensure_topics
from tests.integration.topology_support import run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "pb"


class VersionWatch:
    """Polls ``client.get()`` every 10 ms in a thread: the wall time each served version was first seen."""

    def __init__(self, client: CombeeClient) -> None:
        self.client = client
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            served = self.client.get()
            if served.source == "log":
                self.seen.setdefault(served.version, time.time())
            time.sleep(0.01)

    async def served_with(self, trace_ids: set[str], timeout_s: float, check_alive) -> PlaybookVersion:
        """Wait until the served version was learned from some of ``trace_ids``."""
        deadline = time.monotonic() + timeout_s
        while True:
            served = self.client.get().published
            if served is not None and served.version in self.seen and trace_ids & set(served.lineage):
                return served
            check_alive()
            assert time.monotonic() < deadline, f"no served version learned from the runs within {timeout_s:.0f} s"
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def moved_at(decisions: list[PromotionDecision], version: int) -> float:
    """When the ``promoted`` pointer moved to ``version`` (Unix time)."""
    return next(d.decided_at for d in decisions if d.served_version == version
                and d.previous_version != version).timestamp()


async def report_runs(client: CombeeClient, tasks: list[Task], suite: TaskSuite, name: str) -> dict[str, Rendering]:
    """Each task rendered by the client, run by the simulated agent with the rendered entries, and reported through
    the client; returns trace_id -> the rendering."""
    rendered: dict[str, Rendering] = {}
    for number, task in enumerate(tasks):
        rendering = client.render(task.prompt, k=5)
        entries = [e for e in client.get().entries if e.entry_id in set(rendering.entry_ids)]
        run = run_task(suite, task, entries, playbook_id=PB, playbook_version=rendering.version,
                       agent_id=client.agent_id, attempt=0, run_seed=number)
        trace_id = f"{name}-{number}"
        await asyncio.to_thread(client.report, task.prompt, run.output, score=run.score, success=run.success,
                                feedback=run.feedback, task_id=task.task_id, trace_id=trace_id)
        rendered[trace_id] = rendering
    return rendered


async def test_the_client_follows_served_versions_keeps_its_cache_without_the_broker_and_reports_used_entries(
        tmp_path, unique_prefix):
    broker = EmbeddedBroker(startup_timeout_s=30).start()  # our own: this test stops it
    profile = BrokerProfile.for_tansu()
    settings = run_settings(unique_prefix, batch_size=20, max_wait_s=2.0, promotion=True,
                            builtin_evaluator_playbooks=PB, promotion_epsilon=0.05)
    cache = tmp_path / "client-cache.json"
    suite = build_suite(seed=7)
    client = later = watch = None
    try:
        async with InProcessPipeline(settings, broker.bootstrap, profile) as run:
            started = time.monotonic()
            client = CombeeClient(PB, bootstrap=broker.bootstrap, topic_prefix=unique_prefix, promotion=True,
                                  cache_path=cache, agent_id="client-agent", report_timeout_s=3.0,
                                  settings=CombeeSettings.load(env={}))
            while not client.state.caught_up:
                assert time.monotonic() - started < 60, f"the client did not read the topics: {client.state}"
                await asyncio.sleep(0.01)
            catch_up_s = time.monotonic() - started
            deadline_s = max(3.0, 10 * catch_up_s)  # from this machine's speed now: connect + read the log to its end
            watch = VersionWatch(client)

            # runs with the empty playbook teach lessons; a promoted version reaches the client within seconds
            first = await report_runs(client, suite.train[:20], suite, "first")
            assert all(r.entry_ids == () and r.version == 0 for r in first.values())
            v1 = await watch.served_with(set(first), 180, run.check_alive)
            lag_1 = watch.seen[v1.version] - moved_at(await run.promotions(), v1.version)

            # runs with a served version: each renders the entries its task needs; its report carries them
            second = await report_runs(client, suite.train[20:40], suite, "second")
            assert any(r.entry_ids for r in second.values()), "no task was given an entry of the served version"
            reported = {t.trace_id: t for t in (Trace.from_json_bytes(r.value) for r in await read_topic(
                broker.bootstrap, profile, settings.topic(Topic.TRACES))) if t.trace_id in second}
            assert set(reported) == set(second)
            versions = {v.version: v for v in await run.versions(PB)}
            for trace_id, rendering in second.items():
                trace = reported[trace_id]
                assert trace.playbook_version == rendering.version >= v1.version
                assert trace.metadata.get(USED_ENTRIES, "") == ",".join(rendering.entry_ids)
                assert set(rendering.entry_ids) <= {e.entry_id for e in versions[rendering.version].entries}
            v2 = await watch.served_with(set(second), 180, run.check_alive)
            lag_2 = watch.seen[v2.version] - moved_at(await run.promotions(), v2.version)
            used = {entry_id for r in second.values() for entry_id in r.entry_ids}
            assert any(e.used_helpful + e.used_harmful > 0 for e in v2.entries if e.entry_id in used), \
                "the reported used entries were not counted by the pipeline"
            print(f"\nclient: caught up in {catch_up_s:.2f} s; v{v1.version} seen {lag_1:.2f} s and v{v2.version} "
                  f"{lag_2:.2f} s after its promotion (deadline {deadline_s:.1f} s)")
            assert 0 <= lag_1 < deadline_s and 0 <= lag_2 < deadline_s, (lag_1, lag_2, deadline_s)

        # the pipeline is stopped; the client reaches the last version it served (after v2 when max_wait split the
        # second runs over two batches); now the broker: the client keeps serving what it had
        final = (await run.promotions())[-1].served_version
        until = time.monotonic() + deadline_s
        while client.get().version != final:
            assert time.monotonic() < until, f"the client did not reach the last served v{final}: {client.state}"
            await asyncio.sleep(0.01)
        watch.stop()
        served = client.get()
        text = client.render("any task about refunds", k=5).text
        broker.stop()
        time.sleep(20 * FETCH_MAX_WAIT_MS / 1000)  # no condition to wait on: the follower polls a dead broker 20 times
        assert client.get().version == served.version and client.get().entries == served.entries
        assert client.render("any task about refunds", k=5).text == text
        with pytest.raises(ReportNotDelivered) as refused:
            client.report("a task", "an answer", success=True)
        assert refused.value.trace.playbook_id == PB

        # an agent started while the broker is away serves the cached version
        later = CombeeClient(PB, bootstrap=broker.bootstrap, topic_prefix=unique_prefix, promotion=True,
                             cache_path=cache, settings=CombeeSettings.load(env={}))
        cached = later.get()
        assert (cached.version, cached.source) == (served.version, "cache")
        assert [e.entry_id for e in cached.entries] == [e.entry_id for e in served.entries]
        assert isinstance(cached.published, PlaybookVersion)
    finally:
        for each in (watch, client, later):
            if each is not None:
                each.stop() if isinstance(each, VersionWatch) else each.close()
        broker.cleanup()


async def test_a_client_started_before_the_pipeline_s_topics_exist_serves_the_first_version_once_they_do(
        kafka, unique_prefix, tmp_path):
    settings = CombeeSettings.load(env={}, topic_prefix=unique_prefix)
    client = CombeeClient(PB, bootstrap=kafka.bootstrap, topic_prefix=unique_prefix, promotion=False,
                          cache_path=tmp_path / "cache.json", settings=CombeeSettings.load(env={}))
    try:
        await asyncio.sleep(1.0)  # the client is up and polling for topics that are not there
        assert (client.get().version, client.state.caught_up) == (0, False)
        await ensure_topics(settings, kafka.bootstrap, connection=kafka.profile.connection)
        first = PlaybookVersion(playbook_id=PB, version=1, parent_version=0, batch_id=0, entries=[],
                                next_entry_number=1, operations=[], lineage=["t1"],
                                stats=VersionStats(batch_size=1, k=1, p=1), content_hash="0" * 64,
                                published_at=datetime.now(timezone.utc))
        producer = await start_producer(kafka.bootstrap, kafka.profile)
        try:
            await producer.send_and_wait(settings.topic(Topic.PLAYBOOK), first.to_json_bytes(), key=PB.encode())
        finally:
            await producer.stop()
        served = await asyncio.to_thread(client.wait_for_version, 1, 30)  # a topic check every second, then a read
        assert served.published == first
    finally:
        client.close()
