"""Every role sees the playbook: on a real broker, with the roles served by a local OpenAI-compatible server.

The fake server answers like the offline simulator (it runs ``simulate`` on the messages it is sent), so the
pipeline learns; the test then reads the prompts the server received after version 1.
"""

from __future__ import annotations

import pytest

from combee_core.llm.prompts import read_data_block
from combee_core.llm.simulator import SimulatorConfig, simulate
from combee_core.playbook import render_entry
from combee_core.sim.task_suite import build_suite, holds_insight, run_task, train_traces
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.topology_support import run_settings
from tests.unit.test_llm_openai_compatible import FakeOpenAIServer

pytestmark = [pytest.mark.integration]


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        fake.answer = lambda body: simulate(body["messages"], SimulatorConfig()).text
        yield fake


def _requests(server: FakeOpenAIServer, task: str) -> list[dict]:
    found = []
    for body in list(server.requests):
        data = read_data_block(body["messages"])
        if data.get("task") == task:
            found.append(data)
    return found


@pytest.mark.parametrize("lag", [0, 1])
async def test_after_version_1_every_role_prompt_carries_the_playbook(kafka, unique_prefix, server, lag):
    settings = run_settings(
        unique_prefix, context_lag=lag, batch_size=4, p=1, max_wait_s=30.0, reflector_model="openai/tiny",
        aggregator_model="openai/tiny", reducer_model="openai/tiny", llm_api_base=server.api_base,
        llm_api_key="local-no-key", llm_max_retries=1,
        deterministic_merge=False,  # every batch goes through the reducer call, whose prompt is checked
    )
    suite = build_suite(seed=7)
    failed = [t for t in train_traces(suite, 60) if t.success is False][:4]  # each states its family's lesson
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, failed)
        v1 = (await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=90, what="version 1"))[0]
        assert v1.entries, "version 1 learned nothing"
        # Agents run tasks of the families version 1 learned, with version 1: they use its entries. Two runs that
        # succeed and two that fail anyway (their feedback restates the lesson the entry holds).
        tasks = [t for t in suite.train if holds_insight(suite.family(t.family_id), v1.entries)]
        runs = [run_task(suite, task, v1.entries, playbook_id="pb", playbook_version=1, agent_id="b",
                         attempt=attempt, run_seed=0) for attempt in range(1, 40) for task in tasks]
        second = [t for t in runs if t.success][:2] + [t for t in runs if not t.success][:2]
        assert len(second) == 4 and all(t.metadata.get("used_entries") for t in second)
        await produce_traces(settings, kafka.bootstrap, kafka.profile, second)
        v2 = (await run.wait_for(lambda vs: len(vs) >= 2, timeout_s=90, what="version 2"))[1]

    lines = [render_entry(entry) for entry in v1.entries]
    aggregations = _requests(server, "aggregate")
    reductions = _requests(server, "reduce")
    assert len(aggregations) == 4 and len(reductions) == 2  # k = floor(sqrt(4)) = 2 per batch, one reduce each
    # Batch 0 was aggregated and reduced with the empty version 0; batch 1 reduced with version 1, every entry in it,
    # and aggregated with version 1 - lag (docs/architecture.md, "Context lag": with lag 1 the version before).
    assert [d["playbook"] for d in aggregations[:2] + reductions[:1]] == ["", "", ""]
    for data in (aggregations[2:] if lag == 0 else []) + reductions[1:]:
        assert all(line in data["playbook"] for line in lines), data["playbook"]
    assert lag == 0 or [d["playbook"] for d in aggregations[2:]] == ["", ""]
    # The reflector read the content of the entries each agent used (not only their ids).
    by_trace = {d["trace"]["trace_id"]: d for d in _requests(server, "reflect")}
    v1_by_id = {e.entry_id: e for e in v1.entries}
    for trace in second:
        used = str(trace.metadata["used_entries"])
        assert render_entry(v1_by_id[used]) in by_trace[trace.trace_id]["used_entries"]
    assert all(by_trace[t.trace_id]["used_entries"] == "" for t in failed)
    # Version 2 did not re-add what version 1 held: a lesson restated by batch 1 reinforced its entry instead.
    restated = {str(t.metadata["used_entries"]) for t in second if t.success is False}
    assert restated
    v2_by_id = {e.entry_id: e for e in v2.entries}
    assert {e.content for e in v2.entries if e.created_version == 2}.isdisjoint(e.content for e in v1.entries)
    assert all(v2_by_id[entry_id].helpful > v1_by_id[entry_id].helpful for entry_id in restated)
