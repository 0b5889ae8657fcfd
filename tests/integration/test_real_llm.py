"""The whole pipeline with a real LLM: SmolLM2-135M-Instruct served by llama.cpp, reached through litellm.

20 traces go through reflector, batcher/shuffler, aggregators and reducer on the real broker. A 135M model writes
poor lessons and sometimes unusable output; what must hold is that no stage crashes, every trace is accounted for
(in a version's lineage, or in a dead letter that says why) and at least one version is published.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from combee_core.settings import CombeeSettings
from streams.local_model import LocalModelServer
from streams.pipeline import InProcessPipeline
from streams.produce import produce_traces
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.real_llm]

TRACES = 20


@pytest.fixture(scope="module")
def local_model() -> Iterator[LocalModelServer]:
    """llama.cpp's OpenAI-compatible server with SmolLM2-135M (from the [local-llm] extra, part of [test])."""
    with LocalModelServer(n_ctx=4096, n_threads=2) as server:
        yield server


async def accounted_for(run: InProcessPipeline, trace_ids: set[str], *, timeout_s: float):
    """Wait until every trace is in a version's lineage or in a dead letter; return (versions, dead letters)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run.check_alive()
        versions, dead = await run.versions(), await run.dead_letters()
        seen = {t for v in versions for t in v.lineage} | {d.trace_id for d in dead}
        if trace_ids <= seen or time.monotonic() > deadline:
            return versions, dead
        await asyncio.sleep(1.0)


async def test_twenty_traces_through_every_stage_with_a_real_model(kafka, unique_prefix, local_model):
    settings = CombeeSettings.load(
        env={}, topic_prefix=unique_prefix, partitions=2, batch_size=10, p=2, max_wait_s=5.0,
        llm_max_tokens=96, llm_max_retries=1, llm_timeout_s=90, llm_concurrency=2,
        **local_model.settings_overrides(),
    )
    traces = make_traces(TRACES, seed=11)
    trace_ids = {t.trace_id for t in traces}
    started = time.monotonic()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions, dead = await accounted_for(run, trace_ids, timeout_s=240)
        run.check_alive()  # no stage died
    elapsed = time.monotonic() - started

    # At least one version, built by the real model's calls.
    assert versions, "no version published"
    assert [v.version for v in versions] == list(range(1, len(versions) + 1))
    ok_calls = [c for c in run.calls if c.error is None]
    assert {c.model for c in run.calls} == {local_model.litellm_model}
    assert Counter(c.role for c in ok_calls)["reflector"] >= 1
    assert all(c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0 for c in ok_calls)  # usage from the server

    # Every trace is in a lineage or in a dead letter that says why.
    in_lineage = {t for v in versions for t in v.lineage}
    dead_by_trace = {d.trace_id: d for d in dead if d.trace_id}
    assert trace_ids <= in_lineage | set(dead_by_trace)
    for letter in dead:
        assert letter.reason and letter.stage in {"reflect", "aggregate", "reduce"}
        if letter.stage == "reflect":
            assert "reflection failed" in letter.reason and local_model.litellm_model in letter.reason
    # Failed attempts are recorded with their reason (unusable output, or a call error), never silently dropped.
    assert all(c.error.startswith(("LLMOutputError", "LLMCallError")) for c in run.calls if c.error)

    print(f"\nreal LLM run: {len(versions)} version(s), {len(in_lineage & trace_ids)}/{TRACES} traces in lineage, "
          f"{len(dead)} dead letter(s) ({Counter(d.stage for d in dead)}), {len(run.calls)} call attempts "
          f"({len(run.calls) - len(ok_calls)} failed), {elapsed:.0f}s")
