"""bench.direct_worker's responder (``bench.throughput --without-litellm``) does the same work as the litellm path
minus litellm: the same answers, call records and costs, so the difference between the two runs is litellm's."""

from bench.direct_worker import simulator_responder
from bench.throughput import SETTINGS, many_traces
from combee_core.llm.config import LLMConfig
from combee_core.llm.roles import LLMRoles
from combee_core.settings import CombeeSettings


async def test_direct_responder_answers_records_and_prices_as_the_litellm_provider():
    settings = CombeeSettings.load(env={}, topic_prefix="t.", **SETTINGS)
    traces = many_traces(12, seed=3)
    through, direct = [], []
    litellm_roles = LLMRoles(LLMConfig.from_settings(settings), on_call=through.append)
    direct_roles = LLMRoles(LLMConfig.from_settings(settings), on_call=direct.append,
                            responder=simulator_responder(settings))

    reflections = [await litellm_roles.reflect(trace) for trace in traces]
    assert [await direct_roles.reflect(trace) for trace in traces] == reflections
    assert any(r.insights for r in reflections)  # failed traces carry lessons: the answers are not all empty
    aggregated = await litellm_roles.aggregate(reflections)
    assert (await direct_roles.aggregate(reflections)).operations == aggregated.operations
    assert len(through) == len(direct) == len(traces) + 1
    assert [r.model_dump() for r in direct] == [r.model_dump() for r in through]  # text, usage, cost, latency, key
    assert all(r.usage.cost_usd > 0 for r in direct)
