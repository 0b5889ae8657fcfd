"""A run that times out says how far each missing trace got, read from the topics (not guessed by the reader)."""

from __future__ import annotations

import asyncio
import time

import pytest

from combee_core.models import Reflection
from streams.topology.pipeline import InProcessPipeline, PipelineTimeout, read_models
from streams.topology.produce import produce_traces
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration]


async def test_a_lineage_timeout_names_the_stage_that_holds_each_missing_trace(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=10)
    traces = make_traces(2, seed=5)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=["reflect"]) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        deadline = time.monotonic() + 60
        while len(await read_models(run, "reflections", Reflection)) < len(traces):
            assert time.monotonic() < deadline, "the reflector did not reflect 2 traces in 60 s"
            await asyncio.sleep(0.3)
        with pytest.raises(PipelineTimeout) as raised:
            await run.wait_for_lineage({t.trace_id for t in traces} | {"never-sent"}, timeout_s=0.1)

    message = str(raised.value)
    assert "3 trace(s) neither in a version nor dead-lettered" in message
    assert "never-sent: not reflected" in message
    assert all(f"{t.trace_id}: reflected, in no batch" in message for t in traces)
