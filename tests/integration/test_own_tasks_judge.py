"""The LLM judge gates promotion on a team's own tasks (issue 41, "Done when"): a hand-written held-out task set
with expected answers, the built-in judge evaluator (``combee_client.judge``: an agent model runs each task with the
candidate playbook, a judge model judges the answer) on the simulator's agent and judge models (docs/simulator.md,
"The agent and the judge of the LLM judge evaluator"), a real broker. A helpful candidate is promoted, a harmful one
rejected, and every call the judge made is on the ``llm-calls`` topic under its own role."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from combee_client.judge import JudgeEvaluator
from combee_core.judge.prompts import PROMPT_VERSION
from combee_core.judge.settings import JudgeSettings
from combee_core.llm.record import parse_call_lines
from combee_core.llm.simulator import format_lesson
from combee_core.models import Trace
from combee_core.promote.task_sets import load_tasks
from combee_core.topology import Topic
from streams.topology.pipeline import InProcessPipeline
from streams.topology.task_sets import register_task_set
from streams.topology.topic_reader import read_topic
from streams.topology.worker import ALL_STAGES
from tests.integration.topology_support import SIZE_CLOSES_S, helpful_then_harmful, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PB = "calendar"
OUR_TASKS = "\n".join(
    f'{{"id": "leap-{n}", "input": "Task {n} of family R08: how many days from 2024-02-01 to 2024-03-01?", '
    f'"expected": "count the end date as included"}}\n'
    f'{{"id": "fx-{n}", "input": "Task {n} of family R03: convert 12.345 EUR to USD.", '
    f'"expected": "round money to two decimals after converting"}}' for n in range(5))
HELPFUL = [("dates", "For leap years (R08), count the end date as included."),
           ("arithmetic", "For currency amounts (R03), round money to two decimals after converting.")]
HARMFUL = [("formatting", "For leap years (R08), skip the check and guess the answer."),
           ("formatting", "For currency amounts (R03), skip the check and guess the answer.")]


def lesson_traces(lessons: list[tuple[str, str]], tag: str, count: int) -> list[Trace]:
    feedback = "Wrong answer.\n" + "\n".join(format_lesson(section, text) for section, text in lessons)
    return [Trace(trace_id=f"{tag}-{i}", playbook_id=PB, playbook_version=0, agent_id=f"agent{i % 4}",
                  task_id=f"train-{tag}-{i}", input="How many days are in February 2028?", output="28",
                  feedback=feedback, score=0.0, success=False, created_at=datetime(2026, 1, 1, tzinfo=UTC))
            for i in range(count)]



async def test_the_llm_judge_promotes_a_helpful_candidate_and_rejects_a_harmful_one_on_our_tasks(
        kafka, unique_prefix, tmp_path):
    settings = run_settings(unique_prefix, promotion=True, held_out_sets=f"{PB}=calendar", batch_size=8,
                            max_wait_s=SIZE_CLOSES_S)
    await register_task_set(settings, kafka.bootstrap, kafka.profile, "calendar",
                            load_tasks(OUR_TASKS.splitlines(), "calendar.jsonl"), source="calendar.jsonl", by="test")
    judge_settings = JudgeSettings.load({"judge_model": "combee-sim/judge", "agent_model": "combee-sim/agent"},
                                        environ={})
    record = tmp_path / "judge-calls.jsonl"
    judge = JudgeEvaluator(judge_settings, record_file=str(record), settings=settings, bootstrap=kafka.bootstrap,
                           concurrency=4)
    stages = [name for name in ALL_STAGES if name != "evaluate"]  # the judge answers, not the built-in evaluator
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=stages) as run:
        found, metrics = await helpful_then_harmful(
            run, settings, kafka, PB, lesson_traces(HELPFUL, "helpful", 8), lesson_traces(HARMFUL, "harmful", 8),
            judge.run, judge.stop)
        versions = await run.versions(PB)

    assert [(d.candidate_version, d.action) for d in found] == [(1, "promote"), (2, "reject")], \
        ([d.reason for d in found], [[e.content for e in v.entries] for v in versions])
    promoted, rejected = found
    assert promoted.task_set == "calendar@1" and promoted.tasks == 10
    assert promoted.evaluator_model == f"combee-sim/judge judging combee-sim/agent ({PROMPT_VERSION})"
    assert promoted.held_out_score is not None and promoted.incumbent_score is not None
    assert promoted.held_out_score - promoted.incumbent_score >= 0.5, (promoted.incumbent_score,
                                                                       promoted.held_out_score)
    assert any("guess the answer" in e.content for e in versions[1].entries), "the harmful rule was learned"
    assert rejected.served_version == 1 and rejected.held_out_score < rejected.incumbent_score
    assert (metrics.scored, metrics.errors, metrics.unreadable) == (30, 0, 0)  # 10 tasks x (v0, v1, v2)

    # every attempt of both roles is on llm-calls (and in the record file), with the prompts' version
    raw = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.LLM_CALLS))
    calls = [c for c in parse_call_lines(r.value for r in raw if r.value) if c.role in ("agent", "judge")]
    assert sorted({c.role for c in calls}) == ["agent", "judge"] and len(calls) == 60
    assert {c.params["prompt_version"] for c in calls} == {PROMPT_VERSION}
    assert len(parse_call_lines(record.read_bytes().splitlines())) == 60
    usage = judge.judge.usage.total
    assert usage.calls == 60 and usage.cost_usd > 0


async def test_combee_judge_answers_a_request_on_the_topics_and_stops_on_sigterm_with_its_cost(kafka, unique_prefix):
    """The command a team runs: ``combee judge`` answers an evaluation request with the judge's score and prints
    what its calls cost when stopped."""
    import signal
    import subprocess

    from aiokafka import AIOKafkaProducer

    from combee_core.models import EvalRequest, EvalResult, PlaybookEntry, entries_digest
    from streams.broker.connection import client_kwargs
    from streams.topology.worker import ensure_topics
    from tests.integration.test_cli import COMBEE
    from tests.integration.topology_support import env_without_combee

    settings = run_settings(unique_prefix)
    await ensure_topics(settings, kafka.bootstrap)
    entries = [PlaybookEntry(entry_id="dates-1", section="dates", content=HELPFUL[0][1], created_version=1,
                             updated_version=1)]
    task = load_tasks(OUR_TASKS.splitlines()[:1])[0]
    request = EvalRequest(request_id="pb/x/leap-0", playbook_id=PB, version=1, digest=entries_digest(entries),
                          task_set="calendar@1", task_id=task.task_id, task_input=task.input, expected=task.expected,
                          entries=entries, requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    env = env_without_combee(COMBEE_JUDGE_MODEL="combee-sim/judge", COMBEE_JUDGE_AGENT_MODEL="combee-sim/agent")
    process = subprocess.Popen([*COMBEE, "judge", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        producer = AIOKafkaProducer(**client_kwargs(kafka.bootstrap, settings.kafka))
        await producer.start()
        try:
            await producer.send_and_wait(settings.topic(Topic.EVAL_REQUESTS), request.to_json_bytes(), key=b"pb")
        finally:
            await producer.stop()
        deadline = time.monotonic() + 90
        results: list[EvalResult] = []
        while not results and time.monotonic() < deadline and process.poll() is None:
            raw = await read_topic(kafka.bootstrap, kafka.profile, settings.topic(Topic.EVAL_RESULTS))
            results = [EvalResult.from_json_bytes(r.value) for r in raw if r.value]
            await asyncio.sleep(0.5)
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    err = process.stderr.read() if process.stderr else ""
    assert returncode == 0, err
    assert [(r.task_id, r.evaluator, r.error) for r in results] == [("leap-0", "llm-judge", "")], err
    assert results[0].evaluator_model == f"combee-sim/judge judging combee-sim/agent ({PROMPT_VERSION})"
    assert results[0].usage is not None and results[0].usage.calls == 2 and results[0].usage.cost_usd > 0
    assert "1 requests: 1 scored, 0 errors" in err and "2 LLM calls (1 agent, 1 judge)" in err, err
