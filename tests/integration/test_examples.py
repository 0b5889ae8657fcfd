"""The any-language examples on a real broker: their traces are learned from, their subscribers see the versions.

Each example (``examples/node``: kafkajs + ajv; ``examples/librdkafka``: confluent-kafka + jsonschema) publishes a
JSONL file with two bad lines (rejected before sending) and a batch of generated traces; the topology runs in
process; the test checks every sent trace_id is in a version's lineage and that the example's subscriber printed
exactly the versions on the playbook topic.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from combee_core.models import PlaybookVersion
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from streams.topology.stages.evaluate import register_suite
from streams.topology.worker import ALL_STAGES
from tests.integration.topology_support import SIZE_CLOSES_S, make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE_DIR = EXAMPLES / "node"


async def _run(*command: str, cwd: Path | None = None, timeout: float = 60) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(*command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode, out.decode(), err.decode()


def _traces_file(directory: Path, playbook_id: str) -> tuple[Path, list[str]]:
    """20 valid traces with a non-JSON line 6 and a schema-breaking line 12 (no agent_id, bad playbook_id)."""
    traces = make_traces(20, playbook_id=playbook_id, seed=5)
    lines = [trace.to_json_bytes().decode() for trace in traces]
    broken = json.loads(lines[0])
    broken.update(trace_id="broken-1", playbook_id="has spaces")
    del broken["agent_id"]
    lines.insert(5, "{this is not json")
    lines.insert(11, json.dumps(broken))
    path = directory / f"{playbook_id}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, [trace.trace_id for trace in traces]


async def _check_example(kafka, prefix: str, tmp_path: Path, producer: list[str], subscriber: list[str]) -> None:
    settings = run_settings(prefix, batch_size=10, max_wait_s=SIZE_CLOSES_S)  # batches of 10, closed by size
    common = ["--bootstrap", kafka.bootstrap, "--prefix", prefix]
    path, file_ids = _traces_file(tmp_path, "pb-file")
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        following = asyncio.create_task(_run(*subscriber, *common, "--max-versions", "3", "--timeout", "90",
                                             timeout=100))

        code, out, err = await _run(*producer, *common, "--file", str(path))
        assert code == 1, err  # some lines were rejected; the valid ones were sent
        assert "line 6: rejected: invalid JSON" in err
        assert "line 12: rejected" in err and "agent_id" in err and "playbook_id" in err
        assert json.loads(out)["sent"] == file_ids

        code, out, err = await _run(*producer, *common, "--generate", "10", "--playbook", "pb-gen")
        assert code == 0, err
        generated = json.loads(out)["sent"]
        assert len(set(generated)) == 10

        versions: list[PlaybookVersion] = await run.wait_for(
            lambda vs: set(file_ids + generated) <= {t for v in vs for t in v.lineage},
            timeout_s=60, what="every example trace in a lineage",
        )
        code, out, err = await following
        assert code == 0, err
        assert not await run.dead_letters()

    assert sorted(t for v in versions if v.playbook_id == "pb-file" for t in v.lineage) == sorted(file_ids)
    assert sorted(t for v in versions if v.playbook_id == "pb-gen" for t in v.lineage) == sorted(generated)
    printed = [json.loads(line) for line in out.splitlines()]
    assert [(p["playbook_id"], p["version"], p["content_hash"]) for p in printed] == [
        (v.playbook_id, v.version, v.content_hash) for v in versions
    ]
    assert sorted((p["playbook_id"], p["version"]) for p in printed) == [("pb-file", 1), ("pb-file", 2), ("pb-gen", 1)]


async def test_librdkafka_example_traces_are_learned_and_its_subscriber_sees_the_versions(
    kafka, unique_prefix, tmp_path
):
    here = EXAMPLES / "librdkafka"
    await _check_example(kafka, unique_prefix, tmp_path, [sys.executable, str(here / "producer.py")],
                         [sys.executable, str(here / "subscriber.py"), "--candidates"])


async def _node_modules_installed() -> None:
    """``npm ci`` from the committed lock file when a clean clone has no node_modules yet."""
    if (NODE_DIR / "node_modules" / "kafkajs").is_dir() and (NODE_DIR / "node_modules" / "ajv").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("node is installed but npm is not: cannot install examples/node dependencies")
    code, out, err = await _run(npm, "ci", "--no-audit", "--no-fund", cwd=NODE_DIR, timeout=240)
    assert code == 0, f"npm ci failed in {NODE_DIR}:\n{out}\n{err}"


async def test_node_example_traces_are_learned_and_its_subscriber_sees_the_versions(kafka, unique_prefix, tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("`node` is not on PATH: the Node.js example (examples/node) needs Node.js 18 or newer")
    await _node_modules_installed()
    await _check_example(kafka, unique_prefix, tmp_path, [node, str(NODE_DIR / "producer.js")],
                         [node, str(NODE_DIR / "subscriber.js"), "--candidates"])


async def test_node_evaluator_answers_evaluation_requests_and_its_subscriber_follows_promotions(kafka, unique_prefix):
    """Promotion with the built-in evaluator left out: the Node evaluator scores every held-out task, the promoter
    decides on its scores, and the Node subscriber (promoted mode, the default) prints the decision."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("`node` is not on PATH: the Node.js example (examples/node) needs Node.js 18 or newer")
    await _node_modules_installed()
    settings = run_settings(unique_prefix, batch_size=40, promotion=True)
    common = ["--bootstrap", kafka.bootstrap, "--prefix", unique_prefix]
    stages = [name for name in ALL_STAGES if name != "evaluate"]
    await register_suite(settings, kafka.bootstrap, kafka.profile)  # the held-out set its keyword judge knows
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile, stages=stages) as run:
        # 120 held-out tasks for the empty incumbent, 120 for candidate v1.
        evaluating = asyncio.create_task(_run(node, str(NODE_DIR / "evaluator.js"), *common, "--max-results", "240",
                                              "--timeout", "110", timeout=120))
        following = asyncio.create_task(_run(node, str(NODE_DIR / "subscriber.js"), *common, "--max-versions", "1",
                                             "--timeout", "110", timeout=120))
        await produce_traces(settings, kafka.bootstrap, kafka.profile, make_traces(40, "pb-eval"))
        deadline = asyncio.get_running_loop().time() + 110
        while not (decisions := await run.promotions()) and asyncio.get_running_loop().time() < deadline:
            run.check_alive()
            await asyncio.sleep(0.5)
        code, out, err = await evaluating
        assert code == 0, err
        code, printed, err = await following
        assert code == 0, err
        code, printed_py, err = await _run(sys.executable, str(EXAMPLES / "librdkafka" / "subscriber.py"), *common,
                                           "--max-versions", "1", "--timeout", "60", timeout=70)
        assert code == 0, err
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision.evaluator_model == "node-example/keyword-judge" and decision.tasks == 120
    assert decision.incumbent_score == pytest.approx(0.3)  # the empty playbook names no rule family
    assert decision.action == "promote" and decision.held_out_score > 0.3
    assert len(out.splitlines()) == 240
    for text in (printed, printed_py):  # the Node and the librdkafka subscribers follow promoted versions
        line = json.loads(text.splitlines()[0])
        assert (line["playbook_id"], line["decision_id"], line["action"], line["version"]) == \
            ("pb-eval", 0, "promote", 1)
        assert line["content_hash"] == decision.served.content_hash


async def test_example_producers_and_subscribers_answer_help_and_refuse_bad_flags_without_a_stack_trace(tmp_path):
    """--help prints the usage (exit 0), an unknown flag one line and the usage (exit 64); --strict sends nothing
    when a line is invalid (exit 1, before any broker is asked), as `combee produce --strict` does."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("`node` is not on PATH: the Node.js example (examples/node) needs Node.js 18 or newer")
    await _node_modules_installed()
    for script in ("producer.js", "subscriber.js", "evaluator.js"):
        code, out, err = await _run(node, str(NODE_DIR / script), "--help")
        assert code == 0 and out.startswith(f"usage: {script}") and not err, err
        code, out, err = await _run(node, str(NODE_DIR / script), "--no-such-flag")
        assert code == 64 and "Unknown option '--no-such-flag'" in err and "usage:" in err, err
        assert "    at " not in err  # no stack trace
    path, _ = _traces_file(tmp_path, "pb-strict")
    unreachable = ["--bootstrap", "127.0.0.1:1", "--file", str(path), "--strict"]
    librdkafka = [sys.executable, str(EXAMPLES / "librdkafka" / "producer.py")]
    for producer in ([node, str(NODE_DIR / "producer.js")], librdkafka):
        code, out, err = await _run(*producer, *unreachable)
        assert code == 1 and json.loads(out) == {"topic": "combee.traces", "sent": [], "rejected": 2}, err
        assert "line 6: rejected" in err and "nothing sent (--strict)" in err
