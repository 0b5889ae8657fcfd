"""In an async fleet a batch closes when the version chain can take it (docs/architecture.md, "When a batch
closes"): a burst far larger than the batch size is never planned far ahead of the chain. At most one closed batch
waits for its context version (b - context_lag, 1 by default), so batch b closes only once batch b-2-lag is a
version."""

from __future__ import annotations

import pytest

from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = "paced"
TRACES = 60
BATCH = 5


@pytest.mark.parametrize("lag", [0, 1])
async def test_a_burst_is_batched_as_the_chain_takes_it_with_at_most_one_batch_waiting(kafka, unique_prefix, lag):
    # Slept simulator latency (a tenth of the model's: calls of 0.1-0.4 s), so the reflector, running its calls
    # concurrently, gets ahead of the chain, whose aggregate and reduce of each batch wait for the previous version.
    settings = run_settings(unique_prefix, batch_size=BATCH, fleet_mode="async", sim_clock="real",
                            sim_time_scale=0.1, max_wait_s=30.0, context_lag=lag)
    traces = make_traces(TRACES, PLAYBOOK, seed=3)
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions = await run.wait_for_lineage({t.trace_id for t in traces}, timeout_s=300)
        manifests = sorted((m for m in await run.manifests() if m.playbook_id == PLAYBOOK), key=lambda m: m.batch_id)
    published = {v.batch_id: v.published_at for v in versions if v.playbook_id == PLAYBOOK}
    learned = [t for v in versions if v.playbook_id == PLAYBOOK for t in v.lineage]
    assert sorted(learned) == sorted(t.trace_id for t in traces)  # each once
    assert all(m.n <= BATCH for m in manifests), [m.n for m in manifests]  # the cap: the fixed size
    behind = 2 + settings.context_lag
    assert all(m.context_lag == settings.context_lag == lag for m in manifests)
    early = [(m.batch_id, (published[m.batch_id - behind] - m.closed_at).total_seconds())
             for m in manifests if m.batch_id >= behind and m.closed_at < published[m.batch_id - behind]]
    assert not early, f"batches closed before the batch {behind} before them was a version (batch, s early): {early}"
