"""What an operator is told on a real broker: a worker on the offline simulator fed protocol-valid traces without
``LESSON`` lines says it cannot learn from them, and promotion with the built-in evaluator refuses a playbook that is
not the synthetic suite's."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest

from combee_core.evaluate.processor import refusal
from combee_core.models import Trace, utc_now
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.test_health import _stderr_until
from tests.integration.topology_support import env_without_combee, make_traces, run_settings

pytestmark = [pytest.mark.integration]


def support_traces(count: int) -> list[Trace]:
    """Traces written as docs/protocol.md describes, from an agent that knows nothing of the simulator."""
    return [Trace(trace_id=f"sb-{i}", playbook_id="support-bot", playbook_version=0, agent_id=f"agent-{i % 3}",
                  task_id=f"ticket-{i}", input=f"Customer {i} asks where their refund is.",
                  output="Told them refunds take 5 days.", feedback="The customer was unhappy: the refund policy "
                  "changed last week and refunds now take 10 days.", success=False, created_at=utc_now())
            for i in range(count)]


async def test_a_simulator_worker_fed_traces_without_lesson_lines_warns_at_start_and_on_empty_versions(
        kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=10, partitions=1)
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix,
         "--batch-size", "10", "--partitions", "1", "--max-wait", "2"],
        env=env_without_combee(COMBEE_SIM_CLOCK="virtual"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        started = await _stderr_until(process, "worker: ready", 60)
        assert "models: reflector combee-sim/default (offline simulator)" in started
        assert started.count("WARNING: reflector, aggregator, reducer run on the offline simulator") == 1
        assert "LESSON[section]: text" in started and "docs/models.md" in started
        await produce_traces(settings, kafka.bootstrap, kafka.profile, support_traces(10))
        later = await _stderr_until(process, "no operations from 10 traces", 90)
        assert "support-bot v1: no operations from 10 traces" in later and "docs/models.md" in later
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    rest = process.stderr.read()
    assert returncode == 0, rest
    stopped = next(line for line in rest.splitlines() if line.startswith("worker stopped:"))
    assert "{" not in stopped and " 10" in stopped  # counters as words, not a Python dict


async def test_promotion_with_the_built_in_evaluator_refuses_a_playbook_that_is_not_the_suites(kafka, unique_prefix):
    settings = run_settings(unique_prefix, promotion=True, batch_size=10, partitions=1)
    assert settings.builtin_evaluator_playbooks == "demo"  # nobody said otherwise
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, make_traces(10, "support-bot"))
        deadline = asyncio.get_running_loop().time() + 90
        while not (decisions := await run.promotions()) and asyncio.get_running_loop().time() < deadline:
            run.check_alive()
            await asyncio.sleep(0.5)
    assert len(decisions) == 1, decisions
    decision = decisions[0]
    assert decision.action == "reject" and decision.served_version == 0
    assert refusal("support-bot") in decision.reason
