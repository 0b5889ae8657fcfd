"""The live-trace guard on the real broker, promotion off (the default): a version whose live traces fail more often
than its parent's is rolled back automatically, agents go back to the parent, the next version is built on the
parent; a harmless version under the same noise is not rolled back; `combee promote` / `rollback` move the pointer
without promotion too; COMBEE_GUARD=0 turns the guard off."""

from __future__ import annotations

import random

import pytest

from combee_core.guard.rule import GUARD
from combee_core.models import Trace
from streams.cli.promote import operator_act
from streams.topology.follower import PlaybookFollower
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.test_cli import _combee
from tests.integration.topology_support import make_traces, run_settings, wait_decisions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HARMLESS, HARMFUL = "a-harmless", "b-harmful"  # sorted: the guard judges the harmless one first in each pass
BATCH = 60
ON_CHILD = 50


def live(traces: list[Trace], version: int, outcomes: list[bool]) -> list[Trace]:
    return [t.model_copy(update=dict(playbook_version=version, success=ok)) for t, ok in zip(traces, outcomes)]


def streams() -> dict[str, tuple[list[Trace], list[Trace]]]:
    """Per playbook: 60 traces on v0 (success 0.8), then 50 on v1 with the same uniform draws: success when the draw is
    below 0.8 for the harmless v1, below 0.35 for the harmful one (so it fails whenever the harmless one does)."""
    rng = random.Random(11)
    before = [rng.random() < 0.8 for _ in range(BATCH)]
    draws = [rng.random() for _ in range(ON_CHILD)]
    out = {}
    for playbook_id, p_child in ((HARMLESS, 0.8), (HARMFUL, 0.35)):
        traces = make_traces(BATCH + ON_CHILD + 10, playbook_id, agents=10)
        out[playbook_id] = (live(traces[:BATCH], 0, before),
                            live(traces[BATCH:BATCH + ON_CHILD], 1, [u < p_child for u in draws]) + traces[-10:])
    return out


async def test_a_harmful_version_is_rolled_back_and_a_harmless_one_is_not(kafka, unique_prefix):
    # One partition: every playbook's traces in production order, so the harmless playbook's are judged first.
    settings = run_settings(unique_prefix, batch_size=BATCH, max_wait_s=600.0, partitions=1,
                            batch_close="size")  # batches of exactly BATCH (chain pacing closes a drained partial one)
    assert settings.guard and not settings.promotion, "the guard is on by default"
    data = streams()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run, \
            PlaybookFollower(settings, kafka.bootstrap, kafka.profile, check_alive=run.check_alive) as agents:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, [t for pb in data for t in data[pb][0]])
        await agents.wait_until(lambda: all(agents.playbook(pb)[0] == 1 for pb in data), 120, "v1 of both")
        await produce_traces(settings, kafka.bootstrap, kafka.profile, data[HARMLESS][1][:ON_CHILD])
        await produce_traces(settings, kafka.bootstrap, kafka.profile, data[HARMFUL][1][:ON_CHILD])

        found = await wait_decisions(run, 1, timeout_s=120)
        assert [(d.playbook_id, d.action, d.by) for d in found] == [(HARMFUL, "rollback", GUARD)], \
            [d.reason for d in found]
        rollback = found[0]
        assert (rollback.candidate_version, rollback.served_version, rollback.paused) == (1, 0, True)
        test = rollback.live_test
        assert test is not None and test.traces <= ON_CHILD and test.parent_traces == BATCH
        assert test.mean < test.parent_mean and test.log_lr >= test.threshold
        await agents.wait_until(lambda: agents.playbook(HARMFUL) == (0, []), 30, "agents back on v0")
        assert agents.playbook(HARMLESS)[0] == 1, "the harmless version is still served"
        code, out, err = await _combee("status", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
        assert code == 0, err
        assert "guard: on: rolls a version back when its live success" in out, out
        assert "served by the promoted pointer: v0, PAUSED" in out and "by guard: live success rate of v1" in out

        # Agents run v0 again; their next traces close batch 1, whose version is built on v0, not on the bad v1.
        tail = [t.model_copy(update=dict(playbook_version=0)) for t in data[HARMFUL][1][ON_CHILD:]]
        await produce_traces(settings, kafka.bootstrap, kafka.profile, tail)
        versions = await run.wait_for(lambda vs: any(v.playbook_id == HARMFUL and v.version == 2 for v in vs),
                                      timeout_s=120, what=f"{HARMFUL} v2")
        v2 = next(v for v in versions if v.playbook_id == HARMFUL and v.version == 2)
        assert v2.parent_version == 0
        v1 = next(v for v in versions if v.playbook_id == HARMFUL and v.version == 1)
        assert not {e.entry_id for e in v1.entries} & {e.entry_id for e in v2.entries}, "nothing of v1 in v2"
        assert agents.playbook(HARMFUL)[0] == 0, "paused: v2 is not served until `combee promote`"
        assert [d.playbook_id for d in await run.promotions()] == [HARMFUL]

        # `combee promote` resumes: v2 (built on v0) is served; `combee rollback` goes back to its parent.
        resumed = await operator_act(settings, kafka.bootstrap, kafka.profile, HARMFUL, "operator-promote", 2,
                                     why="checked", by="tester@ci")
        assert (resumed.previous_version, resumed.newest_version, resumed.paused) == (0, 2, False)
        await agents.wait_until(lambda: agents.playbook(HARMFUL)[0] == 2, 15, "agents on v2 after combee promote")
        back = await operator_act(settings, kafka.bootstrap, kafka.profile, HARMFUL, "rollback", None, by="tester@ci")
        assert (back.served_version, back.previous_version, back.paused) == (0, 2, True)
        await agents.wait_until(lambda: agents.playbook(HARMFUL)[0] == 0, 15, "agents on v0 after combee rollback")


async def test_with_the_guard_off_the_harmful_version_stays_and_is_built_on(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=BATCH, max_wait_s=600.0, partitions=1, guard=False,
                            batch_close="size")  # batches of exactly BATCH
    first, second = streams()[HARMFUL]
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, first)
        await run.wait_for(lambda vs: len(vs) == 1, timeout_s=120, what="v1")
        await produce_traces(settings, kafka.bootstrap, kafka.profile, second)
        versions = await run.wait_for(lambda vs: len(vs) == 2, timeout_s=120, what="v2")
        assert versions[1].parent_version == 1 and await run.promotions() == []
