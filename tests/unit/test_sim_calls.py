"""A simulated role call answered in-process (no litellm) gives the records litellm's combee-sim provider gives:
the same keys, texts, tokens, prices and modelled latencies, the same retries and errors; and a worker whose roles
all run on the simulator never imports litellm (issue 43: seconds of CPU at every start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.errors import LLMError
from combee_core.llm.roles import LLMRoles
from combee_core.llm.simulator import SimulatorConfig
from combee_core.models import CallRecord
from combee_core.settings import CombeeSettings
from streams.topology.llm_setup import calls_a_provider
from tests.hang_guard import SUBPROCESS_HANG_S
from tests.unit.test_llm_roles import make_trace

FAST = RoleConfig(backoff_s=0.001)


async def _records(config: LLMConfig, through_litellm: bool) -> tuple[list[CallRecord], str | None]:
    records: list[CallRecord] = []
    roles = LLMRoles(config, on_call=records.append, sim_through_litellm=through_litellm)
    failure = None
    try:
        reflections = [await roles.reflect(make_trace(i)) for i in range(3)]
        result = await roles.aggregate(reflections)
        await roles.reduce([result.operations, result.operations[:1]])
    except LLMError as error:
        failure = f"{type(error).__name__} {error.attempts} {getattr(error, 'retryable', None)}"
    return records, failure


def _comparable(record: CallRecord) -> dict:
    """What must not depend on the way a simulated call is answered (wall time and the error's wording may)."""
    data = record.model_dump(exclude={"latency_s", "error"})
    data["error_kind"] = record.error.split(":")[1].strip() if record.error else None
    return data


@pytest.mark.parametrize("sim", [
    {},
    {"fail_first_n": 2},
    {"fail_first_n": 3},
    {"malformed_first_n": 1},
    {"output_style": "messy"},
    {"seed": 11, "capacity": 2.0},
])
async def test_in_process_answers_are_the_ones_litellm_gives(sim):
    config = LLMConfig(reflector=FAST, aggregator=FAST, reducer=FAST, simulator=SimulatorConfig(**sim))
    direct, direct_failure = await _records(config, through_litellm=False)
    litellm, litellm_failure = await _records(config, through_litellm=True)
    assert [_comparable(r) for r in direct] == [_comparable(r) for r in litellm]
    assert direct_failure == litellm_failure
    assert all(r.latency_s == r.modelled_latency_s for r in direct if r.error is None)  # virtual mode


async def test_a_modelled_latency_over_the_timeout_is_an_overload_both_ways():
    import litellm  # noqa: F401  # imported first: its import (seconds under load) must not fall in the 0.1 s timeout

    slow = RoleConfig(timeout_s=0.1, max_retries=1, backoff_s=0.001)
    outcomes = []
    for through_litellm in (False, True):
        records: list[CallRecord] = []
        roles = LLMRoles(LLMConfig(reflector=slow), on_call=records.append, sim_through_litellm=through_litellm)
        with pytest.raises(LLMError, match="Timeout") as caught:
            await roles.reflect(make_trace(1))
        outcomes.append((caught.value.attempts, caught.value.overload, [r.error.split(":")[1] for r in records]))
        assert roles.concurrency("reflector") < LLMConfig().role("reflector").concurrency  # it backed off
    assert outcomes[0] == outcomes[1]


async def test_real_mode_sleeps_the_modelled_latency_in_process():
    config = LLMConfig(reflector=FAST, simulator=SimulatorConfig(mode="real", time_scale=0.05))
    records: list[CallRecord] = []
    await LLMRoles(config, on_call=records.append).reflect(make_trace(1))
    [record] = records
    assert record.modelled_latency_s and record.latency_s >= record.modelled_latency_s


def test_a_worker_calls_a_provider_unless_every_role_is_simulated_or_replayed():
    assert not calls_a_provider(CombeeSettings())  # the defaults: the simulator
    assert calls_a_provider(CombeeSettings(reducer_model="openai/gpt-4o-mini"))
    assert not calls_a_provider(CombeeSettings(reducer_model="openai/gpt-4o-mini", llm_record="replay"))


def _imported(code: str) -> str:
    script = textwrap.dedent(code) + textwrap.dedent("""
        heavy = sorted({m.split('.')[0] for m in sys.modules} & {'litellm', 'openai'})
        print(heavy)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_worker_on_the_simulator_never_imports_litellm():
    """What ``combee worker`` runs with the default (simulated) models: the command line, the worker module, its
    role set-up and calls of every role. ``import litellm`` costs seconds of CPU; none of this may need it."""
    assert _imported("""
        import asyncio, sys
        import streams.cli, streams.topology.worker
        from combee_core.settings import CombeeSettings
        from streams.topology.llm_setup import build_llm_roles, calls_a_provider
        from tests.unit.test_llm_roles import make_trace

        async def main():
            settings = CombeeSettings()
            assert not calls_a_provider(settings)
            roles = build_llm_roles(settings)
            reflection = await roles.reflect(make_trace(1))
            await roles.reduce([(await roles.aggregate([reflection])).operations])

        asyncio.run(main())
    """) == "[]"


def test_a_worker_calling_a_provider_still_imports_litellm():
    """The check above can see litellm: roles with a provider's model ask for it when they are made. Seen without
    paying its import (~10 s of CPU): a finder placed first refuses litellm and openai, and the refusal is what
    making the roles raises."""
    script = textwrap.dedent("""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"litellm", "openai"}:
                    raise ModuleNotFoundError(f"refused: {name}", name=name)

        sys.meta_path.insert(0, Refuse())
        from combee_core.settings import CombeeSettings
        from streams.topology.llm_setup import build_llm_roles
        try:
            build_llm_roles(CombeeSettings(reducer_model="openai/gpt-4o-mini"))
        except ModuleNotFoundError as error:
            print(error.name)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1:] == ["litellm"]
