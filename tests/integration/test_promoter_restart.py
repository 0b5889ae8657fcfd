"""A restarted promoter starts its logs from its checkpoints, not from the beginning, and decides as one that read
everything (``combee_core.promote.promoter_resume``, ``streams/topology/promoter_views.py``).

A run with promotion decides three versions, one batch of traces at a time (promote, promote, and a reject of the
batch that taught a harmful rule: ``test_promoted_versions.poisoned_stream``), and goes quiet (every version decided,
nothing in flight); the worker stops, a new one starts on the same topics and the last batch comes. Its candidate is
scored against the served v2, whose results are far back on ``eval-results``, and costed with the rejected v3.

The new promoter must say it resumed each of its four views from a checkpoint past the start of the log, and the
run's decisions must still be those of one promoter that never stopped: every candidate decided once, in version
order, no decision id with two contents; no (content, task) pair evaluated twice (the cache of results it skipped the
start of still holds the served version's scores); and a replay of the same traces, by a promoter that reads
everything once, makes the same decisions byte for byte."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter

import pytest

from combee_core.models import EvalRequest, PromotionDecision, ViewCheckpoint
from combee_core.promote.promotion import in_canary
from combee_core.topology import Topic
from streams.runs.replay import ReplayOptions, replay_from_topics
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic
from tests.integration.test_promoted_versions import PB, STAGES, poisoned_stream
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BATCH, BEFORE, AFTER = 40, 3, 1
"""Batches closed by size: 3 versions decided before the restart, 1 after."""
VIEWS = ("promote/playbook", "promote/promoted", "promote/batches", "promote/eval-results")


async def _decided(run: InProcessPipeline, count: int) -> list[PromotionDecision]:
    versions = await run.wait_for(lambda vs: len([v for v in vs if v.playbook_id == PB]) >= count, timeout_s=600)
    return await run.wait_decided([v for v in versions if v.playbook_id == PB], timeout_s=600)


async def test_a_restarted_promoter_resumes_from_its_checkpoints_and_decides_the_same(kafka, unique_prefix, caplog):
    caplog.set_level(logging.INFO, logger="streams")
    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, promotion_epsilon=0.005,
                            batch_size=BATCH, max_wait_s=600.0, view_checkpoint_every=2,
                            batch_close="size")  # batches of exactly BATCH
    traces, _ = poisoned_stream()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, STAGES) as run:
        for batch in range(BEFORE):  # one batch at a time: each log's later checkpoints are written past decisions
            await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[BATCH * batch:BATCH * (batch + 1)])
            before = await _decided(run, batch + 1)
    assert [(d.candidate_version, d.action) for d in before] == [(1, "promote"), (2, "promote"), (3, "reject")]
    caplog.clear()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, STAGES) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces[BATCH * BEFORE:])
        await _decided(run, BEFORE + AFTER)
        decisions = await read_models(run, Topic.PROMOTED, PromotionDecision)
        requests = await read_models(run, Topic.EVAL_REQUESTS, EvalRequest)
        found = await run.promotions()
        lengths = {f"promote/{t}": len(await read_topic(kafka.bootstrap, kafka.profile, settings.topic(t)))
                   for t in (Topic.PLAYBOOK, Topic.PROMOTED, Topic.BATCHES, Topic.EVAL_RESULTS)}
    resumed = dict(re.findall(r"(promote/[\w-]+): resumed from its checkpoint at offset (\d+)", caplog.text))

    assert set(resumed) == set(VIEWS), caplog.text[-3000:]
    print("resumed at / records at the end:", {view: (int(resumed[view]), lengths[view]) for view in VIEWS})
    assert all(int(offset) > 0 for offset in resumed.values()), resumed  # each view skipped the start of its log
    ours = [d for d in found if d.playbook_id == PB]
    assert [d.candidate_version for d in ours] == list(range(1, BEFORE + AFTER + 1)), [
        (d.decision_id, d.candidate_version, d.action) for d in ours]
    assert ours[3].previous_version == 2 and ours[3].incumbent_score == ours[1].held_out_score
    assert ours[3].action != "promote" or ours[3].cost.candidates == 2  # the rejected v3's cost counts too
    contents: dict[int, set[str]] = {}
    for decision in decisions:
        contents.setdefault(decision.decision_id, set()).add(decision.decision_hash())
    assert all(len(hashes) == 1 for hashes in contents.values()), contents
    twice = [pair for pair, n in Counter((r.digest, r.task_id) for r in requests).items() if n > 1]
    assert twice == [], f"{len(twice)} (content, task) pairs evaluated twice, e.g. {twice[:2]}"

    replay = await replay_from_topics(settings, kafka.bootstrap, kafka.profile, ReplayOptions())
    again = await InProcessPipeline(replay.settings, kafka.bootstrap, kafka.profile).promotions()
    assert [d.decision_hash() for d in again] == [d.decision_hash() for d in ours], (
        [(d.candidate_version, d.action, d.held_out_score) for d in again],
        [(d.candidate_version, d.action, d.held_out_score) for d in ours])


async def _traces_checkpoint(settings, kafka, position: int, timeout_s: float) -> None:
    """Wait until the promoter has checkpointed a traces partition at ``position``."""
    deadline = time.monotonic() + timeout_s
    seen: set[int] = set()
    while time.monotonic() < deadline:
        for record in await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.CHECKPOINTS)):
            checkpoint = ViewCheckpoint.from_json_bytes(record.value)
            if checkpoint.view.startswith("promote/traces/"):
                seen.add(checkpoint.position)
        if position in seen:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"no traces checkpoint at {position} after {timeout_s:.0f} s: {sorted(seen)}")


async def test_a_restarted_canary_counts_the_live_traces_from_before_the_restart(kafka, unique_prefix, caplog):
    """Canary on (half the agents, 10 scored traces a side): v1 goes to canary; 10 traces of the incumbent come
    first (no verdict counts them), then 5 of the canary and 5 of the incumbent, and the worker stops. The restarted
    promoter must resume its traces partition at the canary's first trace (past 30 traces) and, with 5 + 5 more,
    reach the verdict of 10 a side: a promoter that skipped the first 5 would wait for 5 more."""
    caplog.set_level(logging.INFO, logger="streams")
    settings = run_settings(unique_prefix, promotion=True, builtin_evaluator_playbooks=PB, batch_size=20,
                            max_wait_s=600.0, canary_share=0.5, canary_min_traces=10, view_checkpoint_every=2,
                            batch_close="size")  # batches of exactly 20: the live traces after v1 make one version
    ordinary = make_traces(60, PB)
    members = [f"agent{i:03d}" for i in range(40) if in_canary(f"agent{i:03d}", 0.5)]
    others = [f"agent{i:03d}" for i in range(40) if not in_canary(f"agent{i:03d}", 0.5)]

    def live(traces, version: int, score: float, agents: list[str]):
        return [t.model_copy(update={"playbook_version": version, "score": score, "success": score > 0.5,
                                     "agent_id": agents[i % len(agents)]}) for i, t in enumerate(traces)]

    canary = live(ordinary[30:40], 1, 0.0, members)
    incumbent = live(ordinary[20:30], 0, 1.0, others) + live(ordinary[40:50], 0, 1.0, others)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, ordinary[:20])
        found = await _decided(run, 1)
        assert [(d.candidate_version, d.action) for d in found] == [(1, "canary")]
        await produce_traces(settings, kafka.bootstrap, kafka.profile, incumbent[:10])  # offsets 20-29
        await produce_traces(settings, kafka.bootstrap, kafka.profile,
                             [t for pair in zip(canary[:5], incumbent[10:15]) for t in pair])  # 30-39
        await _traces_checkpoint(settings, kafka, 30, timeout_s=120)
    caplog.clear()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile,
                             [t for pair in zip(canary[5:], incumbent[15:]) for t in pair])
        found = await _decided(run, 2)
    resumed = re.findall(r"promote/traces/\d+: resumed from its checkpoint at offset (\d+)", caplog.text)
    assert "30" in resumed, caplog.text[-3000:]
    assert [(d.candidate_version, d.action) for d in found] == [(1, "canary"), (1, "reject"), (2, "reject")]
    assert found[1].canary_score == 0.0 and found[1].canary_incumbent_score == 1.0 and found[1].canary_traces == 10
