"""The whole pipeline with a real LLM: SmolLM2-135M-Instruct served by llama.cpp, reached through litellm.

Four traces go through reflector, batcher/shuffler, aggregators and reducer on the real broker. A
135M model writes poor lessons and sometimes unusable output; what must hold is that no stage crashes, every trace is
accounted for (in a version's lineage, or in a dead letter that says why) and at least one version is published.

The deadline is not a guess: a warm-up call measures how fast the model answers on this machine right now (it is
shared and often loaded), and the run may take a generous multiple of the slowest case at that speed. The server
runs one thread, so a busy second core slows it down instead of stalling its threads at every barrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from combee_core.llm.config import LLMConfig
from combee_core.llm.errors import LLMError
from combee_core.llm.roles import LLMRoles
from combee_core.settings import CombeeSettings
from streams.local_model.model_server import LocalModelServer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.real_llm]

TRACES = 4
BATCH = 4
"""One batch when the model answers a call within ``MAX_WAIT_S``: k = floor(sqrt(4)) = 2 subgroups, so the
reducer's LLM is called too. A call takes ~50 s here (one thread, schema-constrained decoding), so batches close by
time with one or two reflections each (k = 1, no reducer call); six traces made ~10 calls for the same assertions."""
RETRIES = 1
MAX_TOKENS = 256
"""Room for the reflector's diagnosis before its insights (at 96 a 135M model spent the answer on the diagnosis)."""
MAX_WAIT_S = 5.0
SLACK = 4.0
"""Multiple of the measured worst case the run may take (aggregator prompts are longer than the warm-up's)."""
FLOOR_S = 600.0
"""Never less than this: a warm-up that happened to answer briefly, or in a lull, must not make the deadline tight."""


@dataclass(frozen=True)
class MeasuredModel:
    server: LocalModelServer
    call_s: float
    """Seconds one reflector call with ``MAX_TOKENS`` took here, just before the run."""

    def settings(self, prefix: str) -> CombeeSettings:
        """The run's settings; a call may take 5 times the warm-up's (it can queue behind another role's call)."""
        return run_settings(prefix, self.server, timeout_s=max(90.0, 5 * self.call_s))

    def deadline_s(self, settings: CombeeSettings, traces: int) -> float:
        """Time for the slowest run: every call (TRACES reflections, k aggregations, 1 reduction) failing once."""
        worst_calls = (traces + 2 + 1) * (1 + settings.llm_max_retries)
        return max(FLOOR_S, 30.0 + settings.max_wait_s + SLACK * worst_calls * self.call_s)


def run_settings(prefix: str, server: LocalModelServer, *, timeout_s: float) -> CombeeSettings:
    return CombeeSettings.load(
        env={}, topic_prefix=prefix, partitions=2, batch_size=BATCH, p=2, max_wait_s=MAX_WAIT_S,
        llm_max_tokens=MAX_TOKENS, llm_max_retries=RETRIES, llm_timeout_s=timeout_s, llm_concurrency=1,
        **server.settings_overrides(),
    )


@pytest.fixture(scope="module")
def local_model() -> Iterator[MeasuredModel]:
    """llama.cpp's OpenAI-compatible server with SmolLM2-135M (extra [local-llm], part of [test]), timed once."""
    with LocalModelServer(n_ctx=4096, n_threads=1) as server:
        roles = LLMRoles(LLMConfig.from_settings(run_settings("warm-up.", server, timeout_s=600.0)))
        warm_up = make_traces(1, seed=99)[0]
        started = time.monotonic()
        with contextlib.suppress(LLMError):  # an unusable answer takes as long: it is the time that counts
            asyncio.run(roles.reflect(warm_up))
        yield MeasuredModel(server, call_s=time.monotonic() - started)


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


async def test_traces_through_every_stage_with_a_real_model(kafka, unique_prefix, local_model):
    model = local_model.server
    settings = local_model.settings(unique_prefix)
    traces = make_traces(TRACES, seed=11)
    trace_ids = {t.trace_id for t in traces}
    deadline_s = local_model.deadline_s(settings, TRACES)
    started = time.monotonic()
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions, dead = await accounted_for(run, trace_ids, timeout_s=deadline_s)
        run.check_alive()  # no stage died
    elapsed = time.monotonic() - started
    summary = (f"{len(versions)} version(s), {len(dead)} dead letter(s) ({dict(Counter(d.stage for d in dead))}), "
               f"{len(run.calls)} call attempts ({dict(Counter(c.role for c in run.calls))}, "
               f"{sum(c.error is not None for c in run.calls)} failed), {elapsed:.0f}s of a {deadline_s:.0f}s deadline "
               f"(warm-up call {local_model.call_s:.1f}s, call timeout {settings.llm_timeout_s:.0f}s)")

    # At least one version, built by the real model's calls.
    assert versions, f"no version published: {summary}"
    assert [v.version for v in versions] == list(range(1, len(versions) + 1))
    ok_calls = [c for c in run.calls if c.error is None]
    assert {c.model for c in run.calls} == {model.litellm_model}
    roles = Counter(c.role for c in ok_calls)
    assert roles["reflector"] >= 1 and roles["aggregator"] >= 1, summary
    if any(v.stats.k >= 2 for v in versions):
        assert Counter(c.role for c in run.calls)["reducer"] >= 1, summary
    assert all(c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0 for c in ok_calls)  # usage from the server
    assert all(c.usage.completion_tokens <= MAX_TOKENS for c in run.calls)

    # Every trace is in a lineage or in a dead letter that says why.
    in_lineage = {t for v in versions for t in v.lineage}
    dead_by_trace = {d.trace_id: d for d in dead if d.trace_id}
    assert trace_ids <= in_lineage | set(dead_by_trace), summary
    for letter in dead:
        assert letter.reason and letter.stage in {"reflect", "aggregate", "reduce"}
        if letter.stage == "reflect":
            assert "reflection failed" in letter.reason and model.litellm_model in letter.reason
    # Failed attempts are recorded with their reason (unusable output, or a call error), never silently dropped.
    assert all(c.error.startswith(("LLMOutputError", "LLMCallError")) for c in run.calls if c.error)
    print(f"\nreal LLM run: {len(in_lineage & trace_ids)}/{TRACES} traces in lineage, {summary}")
