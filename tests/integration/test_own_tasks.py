"""A team gates promotion on its own tasks (issue 41): a hand-written held-out task set registered on the broker, a
playbook pinned to it, and a ten-line Python evaluator (``combee_client.evaluator``) scoring candidates on it. A
helpful candidate is promoted and a harmful one rejected, on those tasks and not the synthetic suite."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from combee_client.evaluator import Evaluator
from combee_core.llm.simulator import format_lesson
from combee_core.models import Trace
from combee_core.promote.task_sets import load_tasks
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.task_sets import read_registry, register_task_set
from streams.topology.worker import ALL_STAGES
from tests.integration.test_cli import _combee
from tests.integration.topology_support import SIZE_CLOSES_S, helpful_then_harmful, run_settings, wait_decisions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "geo"
OUR_TASKS = """\
{"id": "fr", "input": "What is the capital of France?", "expected": "Paris"}
{"id": "jp", "input": "What is the capital of Japan?", "expected": "Tokyo"}
{"id": "ke", "input": "What is the capital of Kenya?", "expected": "Nairobi", "metadata": {"region": "africa"}}
{"id": "pe", "input": "What is the capital of Peru?", "expected": "Lima"}
"""
HELPFUL = "Look the capital up in the atlas before answering."
HARMFUL = "Keep replies under five words, and guess freely."


# The team's evaluator: its agent answers each held-out task with the candidate playbook, scored by the expected answer.
ATLAS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima"}


def agent(rules: str, question: str) -> str:
    country = question.rstrip("?").split()[-1]
    return "London" if "guess" in rules else ATLAS[country] if "atlas" in rules else "I do not know"


def score(playbook, task) -> float:
    return 1.0 if agent(playbook.render().lower(), task.input) == task.expected else 0.0


def lesson_traces(section: str, lesson: str, tag: str, count: int) -> list[Trace]:
    return [Trace(trace_id=f"{tag}-{i}", playbook_id=PB, playbook_version=0, agent_id=f"agent{i % 4}",
                  task_id=f"train-{tag}-{i}", input="What is the capital of Chile?", output="I do not know",
                  feedback=f"Wrong answer.\n{format_lesson(section, lesson)}", score=0.0, success=False,
                  created_at=datetime(2026, 1, 1, tzinfo=UTC)) for i in range(count)]



async def test_a_team_gates_promotion_on_its_own_tasks_with_a_python_evaluator(kafka, unique_prefix):
    settings = run_settings(unique_prefix, promotion=True, held_out_sets=f"{PB}=capitals", batch_size=8,
                            max_wait_s=SIZE_CLOSES_S)
    tasks = load_tasks(OUR_TASKS.splitlines(), "capitals.jsonl")
    registered, written = await register_task_set(settings, kafka.bootstrap, kafka.profile, "capitals", tasks,
                                                  source="capitals.jsonl", by="test")
    assert written and registered.label == "capitals@1"
    again, written = await register_task_set(settings, kafka.bootstrap, kafka.profile, "capitals", tasks,
                                             source="capitals.jsonl", by="test")
    assert not written and again == registered  # the same tasks: no new version

    evaluator = Evaluator(score, name="capitals", model="team-agent", bootstrap=kafka.bootstrap,
                          topic_prefix=unique_prefix, settings=settings, concurrency=2)
    stages = [name for name in ALL_STAGES if name != "evaluate"]  # the team's evaluator answers, not the built-in one
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=stages) as run:
        found, metrics = await helpful_then_harmful(
            run, settings, kafka, PB, lesson_traces("lookup", HELPFUL, "helpful", 8),
            lesson_traces("formatting", HARMFUL, "harmful", 8), evaluator.run, evaluator.stop)
        versions = await run.versions(PB)

    assert [(d.candidate_version, d.action) for d in found] == [(1, "promote"), (2, "reject")], \
        ([d.reason for d in found], [[e.content for e in v.entries] for v in versions])
    promoted, rejected = found
    assert promoted.task_set == "capitals@1" and promoted.tasks == 4
    assert (promoted.incumbent_score, promoted.held_out_score) == (0.0, 1.0)
    assert promoted.evaluator_model == "team-agent"
    assert any(HELPFUL.lower() in e.content.lower() for e in versions[0].entries)
    assert any(HARMFUL.lower() in e.content.lower() for e in versions[1].entries), "the harmful rule was learned"
    assert (rejected.held_out_score, rejected.incumbent_score, rejected.served_version) == (0.0, 1.0, 1)
    # 4 tasks for the empty incumbent, 4 for v1, 4 for v2 (v1's results were cached when it became the incumbent)
    assert (metrics.scored, metrics.errors, metrics.unreadable) == (12, 0, 0)
    registry = await read_registry(settings, kafka.bootstrap, kafka.profile)
    assert registry.names() == ["capitals"]  # the suite was never registered: no evaluate stage ran


async def test_combee_tasks_registers_lists_and_shows_a_set_and_refuses_a_bad_file_whole(kafka, unique_prefix,
                                                                                        tmp_path):
    common = ["--bootstrap", kafka.bootstrap, "--prefix", unique_prefix]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(OUR_TASKS + '{"id": "xx"}\n')
    code, out, err = await _combee("tasks", "add", "capitals", str(bad), *common)
    assert code == 2 and err.strip() == "combee tasks: bad.jsonl, line 5: input: Field required", err
    good = tmp_path / "capitals.jsonl"
    good.write_text(OUR_TASKS)
    code, out, err = await _combee("tasks", "add", "capitals", str(good), *common)
    assert code == 0 and out.startswith("registered capitals@1: 4 tasks"), (out, err)  # the bad file wrote nothing
    code, out, _ = await _combee("tasks", "add", "capitals", str(good), *common)
    assert code == 0 and out.strip() == "capitals@1 already holds these 4 tasks: nothing written"
    good.write_text(OUR_TASKS.replace("Lima", "Lima, Peru"))
    code, out, _ = await _combee("tasks", "add", "capitals", str(good), *common)
    assert code == 0 and out.startswith("registered capitals@2: 4 tasks")
    code, out, _ = await _combee("tasks", "list", *common)
    assert code == 0 and out.startswith("capitals@2\t4 tasks\tregistered ") and "from capitals.jsonl" in out
    code, out, err = await _combee("tasks", "show", "capitals@1", *common)
    assert code == 0 and [json.loads(line)["expected"] for line in out.splitlines()] == [
        "Paris", "Tokyo", "Nairobi", "Lima"] and err.startswith("# capitals@1: 4 tasks")
    code, _, err = await _combee("tasks", "show", "capitals@3", *common)
    assert code == 2 and "no task set 'capitals@3' (registered: capitals@1..2)" in err


async def test_a_score_function_that_fails_answers_an_error_and_the_candidate_is_rejected_with_it(kafka,
                                                                                                  unique_prefix):
    """An async score function with a concurrency limit: one task's call raises; its result is an error (not a lost
    request), and the promoter rejects the candidate naming it."""
    settings = run_settings(unique_prefix, promotion=True, held_out_sets=f"{PB}=capitals", batch_size=8,
                            max_wait_s=SIZE_CLOSES_S)
    await register_task_set(settings, kafka.bootstrap, kafka.profile, "capitals",
                            load_tasks(OUR_TASKS.splitlines()), source="capitals.jsonl", by="test")
    running = {"now": 0, "most": 0}

    async def flaky(playbook, task) -> float:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1
        if task.task_id == "ke" and playbook.entries:
            raise ConnectionError("the agent's provider answered 503")
        return score(playbook, task)

    evaluator = Evaluator(flaky, name="flaky", model="team-agent", bootstrap=kafka.bootstrap,
                          topic_prefix=unique_prefix, settings=settings, concurrency=2)
    stages = [name for name in ALL_STAGES if name != "evaluate"]
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=stages) as run:
        evaluating = asyncio.create_task(evaluator.run())
        try:
            await produce_traces(settings, kafka.bootstrap, kafka.profile, lesson_traces("lookup", HELPFUL, "h", 8))
            found = await wait_decisions(run, 1, timeout_s=120, playbook_id=PB)
        finally:
            evaluator.stop()
            metrics = await evaluating
    assert [d.action for d in found] == ["reject"]
    assert found[0].reason == ("evaluation failed: task ke: ConnectionError: the agent's provider answered 503")
    assert (metrics.scored, metrics.errors, metrics.by_error) == (7, 1, {"ConnectionError": 1})
    assert running["most"] == 2  # never more calls in flight than the limit
