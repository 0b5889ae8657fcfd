"""Promotion on the real broker: a harmful lesson is not promoted, learning continues from the incumbent, an
operator's rollback reaches subscribers within seconds, and a replay makes the same decisions."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable

import pytest

from combee_core.promote.promotion import in_canary
from combee_core.sim.task_suite import build_suite, misleading_trace
from streams.cli.promote import operator_act
from streams.topology.follower import PlaybookFollower
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.worker import ALL_STAGES
from tests.integration.command_clock import combee_timed
from tests.integration.test_cli import _combee
from tests.integration.topology_support import (
    SIZE_CLOSES_S,
    env_without_combee,
    make_traces,
    run_settings,
    wait_decisions,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "pb"
COMMAND_S = 300.0
"""The most a `combee` command here gets: what stops a hang, not a promise (a `combee rollback` took 18 s at load 28,
three readers at once 27 s, a replay 26 s; the assertions on time are relative to the command's own speed)."""
STAGES = tuple(stage for stage in ALL_STAGES if stage != "control")
"""Every stage but the controller's: without ``auto_batch_size`` it decides nothing and would only tail the metrics."""


def poisoned_stream():
    """80 ordinary traces (batches 0-1), then 40 misleading ones teaching 8 families' harmful rule (batch 2), then
    40 ordinary ones (batch 3)."""
    suite = build_suite(seed=7)
    ordinary = make_traces(160, PB)
    families = {f.family_id for f in suite.families[:8]}
    tasks = [t for t in suite.train if t.family_id in families][:40]
    misled = [misleading_trace(suite, task, playbook_id=PB, playbook_version=0, agent_id=f"liar{i % 4}", attempt=0)
              for i, task in enumerate(tasks)]
    return ordinary[:80] + misled + ordinary[80:120], {f.harmful_insight for f in suite.families}


async def _when(done: Awaitable[object]) -> float:
    """``time.monotonic()`` once ``done`` is."""
    await done
    return time.monotonic()


def _port(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


async def test_a_harmful_candidate_is_not_promoted_and_learning_continues_from_the_incumbent(kafka, unique_prefix,
                                                                                             tmp_path):
    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, promotion_epsilon=0.005,
                            max_wait_s=SIZE_CLOSES_S)  # 4 batches of 40, each closed by size
    traces, harmful = poisoned_stream()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, STAGES) as run, \
            PlaybookFollower(settings, kafka.bootstrap, kafka.profile, check_alive=run.check_alive) as agents:
        fed = time.monotonic()
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        found = await wait_decisions(run, 4, timeout_s=180)
        learned_s = time.monotonic() - fed
        versions = await run.versions(PB)

        assert [(d.candidate_version, d.action) for d in found] == \
            [(1, "promote"), (2, "promote"), (3, "reject"), (4, "promote")], [d.reason for d in found]
        rejected = found[2]
        assert rejected.served_version == 2 and rejected.held_out_score < rejected.incumbent_score - 0.005
        assert "learning continues from v2" in rejected.reason
        v3, v4 = versions[2], versions[3]
        assert any(e.content in harmful for e in v3.entries), "the misleading batch taught the harmful rule"
        assert v4.parent_version == 2 and not any(e.content in harmful for e in v4.entries)
        assert {e.content for e in versions[1].entries} <= {e.content for e in v4.entries}
        assert found[3].held_out_score >= found[1].held_out_score and found[3].previous_version == 2
        promoted = found[0]
        assert promoted.evaluator_model == settings.evaluator_model and promoted.tasks == 120
        assert promoted.proposer.reducer == settings.reducer_model
        assert promoted.cost.traces == 40 and promoted.cost.gain_points > 0 and promoted.cost.cost_usd_per_point > 0
        # v1's aggregate and reduce calls, and the 40 reflector calls of its batch (from the batch's manifest).
        assert promoted.cost.llm_calls == versions[0].stats.llm_calls + 40
        assert promoted.cost.cost_usd > versions[0].stats.cost_usd
        assert found[3].cost.candidates == 2 and found[3].cost.traces == 80  # the rejected v3's cost counts too

        # The agents run the served version, never the rejected candidate.
        await agents.wait_until(lambda: agents.playbook(PB)[0] == 4, 30, "agents on v4")
        assert agents.latest[PB].version == 4

        # `combee rollback`, one command, reaches the agents within seconds and pauses automatic promotion. Timed from
        # the command's first contact with the broker: its interpreter's start before that took 9 s at load 28.
        common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
        on_v1 = asyncio.create_task(_when(agents.wait_until(lambda: agents.playbook(PB)[0] == 1, COMMAND_S,
                                                            "agents back on v1")))
        try:
            rolled = await combee_timed("rollback", PB, "--to", "1", "--reason", "bad answers in production",
                                        *common, port=_port(kafka.bootstrap), clock=tmp_path / "rollback.clock",
                                        env=env_without_combee(), timeout_s=COMMAND_S)
            assert rolled.code == 0, rolled.err
            switched = await on_v1
        finally:
            on_v1.cancel()
        assert "serving v1 (was v4)" in rolled.out and "paused" in rolled.out
        rollback = agents.ledger.latest[PB]
        assert rollback.action == "rollback" and rollback.paused and "bad answers in production" in rollback.reason
        assert "@" in rollback.by and agents.playbook(PB)[1] == versions[0].entries
        rollback_s = switched - rolled.first_contact
        print(f"rollback: {rollback_s:.2f} s from the command's first contact with the broker to the agents on v1 "
              f"(its start-up before that: {rolled.start_up_s:.2f} s)")
        # 10 s on an idle machine (the start-up is 1-2 s there); on a loaded one the command's reads and write run
        # as slowly as its start did (at load 28: start-up 9.3 s, its write 6.1 s after the first contact, the
        # agents on v1 0.6 s after the write)
        assert rollback_s < 10 + rolled.start_up_s

        status, decided, candidates = await asyncio.gather(  # three readers at once: the run idles meanwhile
            _combee("status", *common, timeout=COMMAND_S),
            _combee("tail", "--max-versions", "5", *common, timeout=COMMAND_S),  # promoted: the run has decisions
            _combee("tail", "--candidates", "--max-versions", "4", *common, timeout=COMMAND_S))
        code, out, err = status
        assert code == 0, err
        assert "incumbent v1, automatic promotion PAUSED; pending candidates: none" in out, out
        assert "last decision: pb decision 4: rollback -> serving v1 (was v4)" in out, out
        code, out, err = decided
        assert code == 0, err
        assert out.count("decision ") == 5 and "decision 2: reject on candidate v3 -> serving v2" in out, out
        assert "per point]" in out and "following promoted versions" in err
        code, out, err = candidates
        assert code == 0, err
        assert out.startswith("pb v1 (parent v0, batch 0)") and "pb v4 (parent v2, batch 3)" in out, out

        # The in-process helper the command uses: an operator promote resumes automatic promotion.
        resumed = await operator_act(settings, kafka.bootstrap, kafka.profile, PB, "operator-promote", 4,
                                     why="fixed", by="tester@ci")
        await agents.wait_until(lambda: agents.playbook(PB)[0] == 4, 15, "agents on v4 again")
        assert resumed.decision_id == 5 and not resumed.paused and resumed.by == "tester@ci"

    # A replay of the traces into a fresh prefix makes the same decisions, byte for byte (but the time): `combee
    # replay` compares them (the operators' rollback and promote are not replayed, nor compared), and all four are
    # read back from its prefix (one replay: the same replay in process as well would prove nothing more).
    env = env_without_combee(COMBEE_PROMOTION="1", COMBEE_BUILTIN_EVALUATOR_PLAYBOOKS=PB,
                             COMBEE_PROMOTION_EPSILON="0.005", COMBEE_SIM_CLOCK="virtual")
    # The replay learns the run again: its deadline is the learning's measured time, 4 times, on top of a command's
    # (the suite timed out a replay at 180 s at load 25-30; 26 s at load 28 here, 22 s at load 17, while the
    # learning took 59 and 15 s).
    replayed_run = await combee_timed("replay", "--prefix", unique_prefix, "--bootstrap", kafka.bootstrap,
                                      port=_port(kafka.bootstrap), clock=tmp_path / "replay.clock", env=env,
                                      timeout_s=COMMAND_S + 4 * learned_s)
    code, out, err = replayed_run.code, replayed_run.out, replayed_run.err
    assert code == 0, err
    assert "promotion decisions: the same as the recording's" in out, out
    replayed = InProcessPipeline(settings.model_copy(update={"topic_prefix": re.search(r" into (\S+)\*", out)[1]}),
                                 kafka.bootstrap, kafka.profile)
    assert [d.decision_hash() for d in await replayed.promotions()] == [d.decision_hash() for d in found[:4]]


async def test_a_canary_that_does_worse_live_is_rejected_with_the_version_built_on_it(kafka, unique_prefix):
    """Canary on (half the agents, 10 scored traces a side): v1 passes held-out and goes to canary; its live traces
    score 0 against the incumbent's 1, so v1 is rejected, v2 (built on v1 meanwhile) too, and v3 is built on v0."""
    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, batch_size=20,
                            canary_share=0.5, canary_min_traces=10, max_wait_s=SIZE_CLOSES_S)
    ordinary = make_traces(120, PB)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run, \
            PlaybookFollower(settings, kafka.bootstrap, kafka.profile, check_alive=run.check_alive) as agents:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, ordinary[:20])
        found = await wait_decisions(run, 1, timeout_s=120)
        assert found[0].action == "canary" and found[0].served_version == 0 and found[0].canary.version == 1
        await agents.wait_until(lambda: agents.ledger.canary(PB) is not None, 15, "the canary decision")
        members = [f"agent{i:03d}" for i in range(40) if in_canary(f"agent{i:03d}", 0.5)]
        others = [f"agent{i:03d}" for i in range(40) if not in_canary(f"agent{i:03d}", 0.5)]
        assert agents.playbook(PB, members[0])[0] == 1 and agents.playbook(PB, others[0])[0] == 0

        # The live traces of the canary do worse than the incumbent's: 10 + 10 scored traces (batch 1).
        live = [t.model_copy(update={"playbook_version": 1, "score": 0.0, "success": False,
                                     "agent_id": members[i % len(members)]}) for i, t in enumerate(ordinary[20:30])]
        live += [t.model_copy(update={"playbook_version": 0, "score": 1.0, "success": True,
                                      "agent_id": others[i % len(others)]}) for i, t in enumerate(ordinary[30:40])]
        await produce_traces(settings, kafka.bootstrap, kafka.profile, live)
        found = await wait_decisions(run, 3, timeout_s=120)
        assert [(d.candidate_version, d.action) for d in found] == [(1, "canary"), (1, "reject"), (2, "reject")]
        assert found[1].canary_score == 0.0 and found[1].canary_incumbent_score == 1.0 and found[1].canary_traces == 10
        assert "built on v1" in found[2].reason and found[2].served_version == 0

        await produce_traces(settings, kafka.bootstrap, kafka.profile, ordinary[40:60])  # batch 2
        found = await wait_decisions(run, 4, timeout_s=120)
        versions = await run.versions(PB)
        assert versions[1].parent_version == 1 and versions[2].parent_version == 0  # v2 on v1, v3 back on v0
        assert found[3].candidate_version == 3 and found[3].action == "canary"
        assert agents.playbook(PB, others[0])[0] == 0


async def test_two_promoters_decide_each_candidate_once_and_the_survivor_takes_over(kafka, unique_prefix):
    """Two workers run the promoter (one owns the single eval-results partition); every candidate gets exactly one
    decision record, and when the second worker stops, decisions go on (from whichever promoter owns it then)."""
    from combee_core.models import PromotionDecision as Decision
    from streams.topology.topic_reader import read_topic

    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, batch_size=20,
                            max_wait_s=SIZE_CLOSES_S)
    traces = make_traces(120, PB)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        second = InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=("promote", "evaluate"))
        await second.__aenter__()
        try:
            await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[:80])
            found = await wait_decisions(run, 4, timeout_s=120)
        finally:
            await second.stop()
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[80:])
        found = await wait_decisions(run, 6, timeout_s=120)
        records = await read_topic(kafka.bootstrap, kafka.profile, settings.topic("promoted"))
    assert [(d.decision_id, d.candidate_version) for d in found] == [(i, i + 1) for i in range(6)]
    # One record per id is what the promoters do (a write only while owning the playbook, a release that waits for
    # it, a catch-up of `promoted` before each write: streams/topology/stages/promoter.py), but without
    # transactions (Tansu has none) a promoter that lost its group session while its send was in flight can still
    # land a second record of an id. What holds by construction is the reading rule: the first record of each id
    # counts (it is `found`), and a later one is the same decision (every field but `decided_at`, the wall clock).
    written = [Decision.from_json_bytes(r.value) for r in records]
    first = {d.decision_id: d for d in reversed(written)}
    assert [first[i] for i in range(6)] == found, [d.decision_id for d in written]
    assert all(d.decision_hash() == first[d.decision_id].decision_hash() for d in written), \
        [(d.decision_id, d.action, d.candidate_version) for d in written]
    if len(written) > 6:
        print(f"second records of one id (void, the same decision): {[d.decision_id for d in written]}")
