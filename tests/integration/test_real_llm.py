"""The whole pipeline with a real LLM: SmolLM2-135M-Instruct served by llama.cpp, reached through litellm.

Two traces go through reflector, batcher/shuffler, aggregators and reducer on the real broker: one batch of 2, each
reflection copied p = 2 times into k = 2 subgroups (``max_fan_in`` 2), so 2 reflector, 2 aggregator and 1 reducer
call (``deterministic_merge`` off: the partials reach the reducer's model even when they do not conflict). A 135M model
writes poor lessons and sometimes unusable output; what must hold is that no stage crashes, every trace is accounted
for (in a version's lineage, or in a dead letter that says why), at least one version is published, and when both
reflections parse the version was made by the reducer's real call.

The deadlines are not guesses: a short warm-up measures how fast the model reads a prompt and writes an answer on this
machine right now (it is shared and often loaded), and every wait derives from the slowest call at that speed (a
prompt filling the context, an answer of ``MAX_TOKENS``). The server runs one thread, so a busy second core slows it
down instead of stalling its threads at every barrier.
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
from combee_core.models.llm_calls import CallRecord
from combee_core.models.traces import Trace
from combee_core.settings import CombeeSettings
from streams.local_model.model_server import LocalModelServer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.topology_support import make_traces

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.real_llm]

TRACES = 2
BATCH = 2
P = 2
FAN_IN = 2
"""One batch of 2 reflections copied twice, at most 2 copies a call: k = 2 subgroups, so the reducer's model merges
their two partials. 4 traces in batches of 4 (k = 2 at fan-in 6) made 6 calls for the same assertions and closed by
time (a call is slower than any fixed ``max_wait_s``), so the reducer was never reached."""
RETRIES = 1
MAX_TOKENS = 256
"""Room for the reflector's diagnosis before its insights (at 96 a 135M model spent the answer on the diagnosis)."""
N_CTX = 4096
PROBE_TOKENS = 32
"""Answer tokens of the warm-up's second call, which times the writing of an answer (the prompt is cached by then)."""
STARTUP_S = 900.0
"""Until the server answers its first token: it imports its web stack and loads the model before anything can be
measured; 120 s (the server's default) ran out at load 44 (2026-11-29), where a start took over 140 s."""
SLACK = 4.0
"""Multiple of the measured worst case the run may take (the machine's load can rise during the run)."""
FLOOR_S = 300.0
"""Never less than this: a warm-up that happened to run in a lull must not make the deadline tight."""


@dataclass(frozen=True)
class MeasuredModel:
    """How fast the model reads and writes here, just before the run (seconds per token, through litellm)."""

    server: LocalModelServer
    prompt_s: float
    """Seconds per prompt token: a reflector prompt with a one-token answer."""
    answer_s: float
    """Seconds per answer token, schema-constrained: the same prompt again (cached) with ``PROBE_TOKENS``."""
    warm_up_s: float

    @property
    def call_s(self) -> float:
        """The slowest call at this speed: a prompt that fills the context (the server refuses longer) and an answer
        of ``MAX_TOKENS``."""
        return (N_CTX - MAX_TOKENS) * self.prompt_s + MAX_TOKENS * self.answer_s

    def settings(self, prefix: str) -> CombeeSettings:
        """The run's settings. A call may take 3 times the slowest (the two aggregator calls queue at the one-request
        server); the batch waits for its second reflection as long as two attempts take, twice over."""
        return run_settings(prefix, self.server, timeout_s=max(90.0, 3 * self.call_s),
                            max_wait_s=2 * (1 + RETRIES) * self.call_s)

    def deadline_s(self, settings: CombeeSettings, traces: int) -> float:
        """Time for the slowest run: every call (TRACES reflections, k aggregations, 1 reduction) failing once."""
        worst_calls = (traces + 2 + 1) * (1 + settings.llm_max_retries)
        return max(FLOOR_S, 30.0 + settings.max_wait_s + SLACK * worst_calls * self.call_s)


def run_settings(prefix: str, server: LocalModelServer, *, timeout_s: float, max_wait_s: float = 5.0,
                 max_tokens: int = MAX_TOKENS, retries: int = RETRIES) -> CombeeSettings:
    return CombeeSettings.load(
        env={}, topic_prefix=prefix, partitions=2, batch_size=BATCH, p=P, max_fan_in=FAN_IN,
        deterministic_merge=False, max_wait_s=max_wait_s, llm_max_tokens=max_tokens, llm_max_retries=retries,
        llm_timeout_s=timeout_s, llm_concurrency=1, **server.settings_overrides(),
    )


def timed_reflection(server: LocalModelServer, trace: Trace, max_tokens: int) -> CallRecord:
    """One reflector attempt of at most ``max_tokens`` answer tokens; its record (usage, wall seconds) parsed or not."""
    records: list[CallRecord] = []
    settings = run_settings("warm-up.", server, timeout_s=600.0, max_tokens=max_tokens, retries=0)
    roles = LLMRoles(LLMConfig.from_settings(settings), on_call=records.append)
    with contextlib.suppress(LLMError):  # a cut answer does not parse: it is the time that counts
        asyncio.run(roles.reflect(trace))
    assert len(records) == 1 and (records[0].error or "LLMOutputError").startswith("LLMOutputError"), records
    return records[0]


@pytest.fixture(scope="module")
def local_model() -> Iterator[MeasuredModel]:
    """llama.cpp's OpenAI-compatible server with SmolLM2-135M (extra [local-llm], part of [test]), timed once: a
    reflector prompt read with a one-token answer, then the same prompt (cached by the server) with a short answer."""
    with LocalModelServer(n_ctx=N_CTX, n_threads=1, startup_timeout_s=STARTUP_S) as server:
        warm_up = make_traces(1, seed=99)[0]
        started = time.monotonic()
        read = timed_reflection(server, warm_up, 1)
        written = timed_reflection(server, warm_up, PROBE_TOKENS)
        answer_s = max(0.0, written.latency_s) / max(1, written.usage.completion_tokens)
        yield MeasuredModel(server, prompt_s=read.latency_s / max(1, read.usage.prompt_tokens), answer_s=answer_s,
                            warm_up_s=time.monotonic() - started)


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
               f"(warm-up {local_model.warm_up_s:.1f}s: {1000 * local_model.prompt_s:.0f} ms a prompt token, "
               f"{1000 * local_model.answer_s:.0f} ms an answer token, slowest call {local_model.call_s:.0f}s; "
               f"max_wait {settings.max_wait_s:.0f}s, call timeout {settings.llm_timeout_s:.0f}s; tokens read/written "
               f"per call: {[(c.role, c.usage.prompt_tokens, c.usage.completion_tokens) for c in run.calls]})")

    # At least one version, built by the real model's calls.
    assert versions, f"no version published: {summary}"
    assert [v.version for v in versions] == list(range(1, len(versions) + 1))
    ok_calls = [c for c in run.calls if c.error is None]
    assert {c.model for c in run.calls} == {model.litellm_model}
    roles = Counter(c.role for c in ok_calls)
    assert roles["reflector"] >= 1 and roles["aggregator"] >= 1, summary
    if any(v.stats.k >= 2 for v in versions):
        assert Counter(c.role for c in run.calls)["reducer"] >= 1, summary
    if not any(d.stage == "reflect" for d in dead):  # both reflections in one batch: k = 2, the reducer's real call
        assert versions[0].stats.k == 2 and Counter(c.role for c in run.calls)["reducer"] >= 1, summary
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
