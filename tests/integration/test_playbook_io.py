"""``combee playbook import`` / ``export`` on a real broker: ACE round trip, and the pipeline builds on a seed."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from combee_core.models import PlaybookVersion, utc_now
from combee_core.runs.ace_format import parse_ace
from combee_core.runs.seed import seed_version
from streams.topology.kafka_clients import start_producer
from streams.topology.pipeline import InProcessPipeline
from streams.topology.produce import produce_traces
from tests.integration.test_cli import _combee
from tests.integration.topology_support import SIZE_CLOSES_S, make_traces, run_settings

pytestmark = [pytest.mark.integration]

SAMPLE = Path(__file__).parents[1] / "data" / "ace_playbook.txt"


@pytest.mark.slow
async def test_ace_import_export_round_trip_and_the_pipeline_builds_on_the_seed(kafka, unique_prefix, tmp_path):
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix, "--partitions", "2")
    code, out, err = await _combee("playbook", "import", str(SAMPLE), "--playbook", "fin", *common)
    assert code == 0, err
    assert "fin v1 published" in out and "8 entries" in out

    code, out, err = await _combee("playbook", "export", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    assert code == 0, err
    assert out == SAMPLE.read_text(encoding="utf-8")  # lossless, byte for byte

    code, out, err = await _combee("playbook", "export", "--format", "json", "--version", "1",
                                   "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    assert code == 0, err
    seeded = PlaybookVersion.model_validate_json(out)
    assert (seeded.version, seeded.parent_version, seeded.batch_id) == (1, 0, 0)
    code, out, err = await _combee("playbook", "export", "--format", "markdown", "--bootstrap", kafka.bootstrap,
                                   "--prefix", unique_prefix)
    assert code == 0 and "## COMMON MISTAKES TO AVOID" in out
    assert "- **cal-00002** (helpful 8, harmful 0; outcome unused)" in out

    # the pipeline takes the seed as version 1: the next batch is batch 1 and becomes version 2 on top of it
    settings = run_settings(unique_prefix, batch_size=10, max_wait_s=SIZE_CLOSES_S)  # one batch of 10, closed by size
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        traces = make_traces(10, "fin", seed=5)
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        versions = await run.wait_for(lambda vs: len(vs) >= 2, timeout_s=90, what="a version after the seed")
        manifests = await run.manifests()
    second = versions[1]
    assert (second.version, second.parent_version, second.batch_id) == (2, 1, 1)
    assert sorted(second.lineage) == sorted(t.trace_id for t in traces)
    assert [m.batch_id for m in manifests] == [0, 1]
    imported = {e.entry_id for e in seeded.entries}
    assert imported <= {e.entry_id for e in second.entries} | {
        a.operation.entry_id for a in second.operations if a.operation.op == "DELETE"}

    code, out, err = await _combee("tail", "--max-versions", "1", "--bootstrap", kafka.bootstrap,
                                   "--prefix", unique_prefix)
    assert code == 0 and out.startswith("fin v1 (parent v0, batch 0): 8 ADD") and "+ [str-00001]" in out


async def test_an_import_while_workers_own_the_playbook_is_rebuilt_from_without_fault_sounding_warnings(
        kafka, unique_prefix, caplog):
    caplog.set_level(logging.INFO, logger="streams")
    settings = run_settings(unique_prefix, batch_size=10, partitions=1)
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix, "--partitions", "1")
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, make_traces(10, "fin", seed=5))
        await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=90, what="v1 from traces")
        code, out, err = await _combee("playbook", "import", str(SAMPLE), "--playbook", "fin", *common)
        assert code == 0 and "fin v2 published" in out, err
        deadline = asyncio.get_running_loop().time() + 30
        while caplog.text.count("after a `combee playbook import`") < 2 and \
                asyncio.get_running_loop().time() < deadline:  # the batcher and the reducer rebuild
            run.check_alive()
            await asyncio.sleep(0.2)
    assert caplog.text.count("after a `combee playbook import`") >= 2, caplog.text
    assert "batch fin/1 was written by `combee playbook import`" in caplog.text
    assert "fin v2 was written by `combee playbook import`" in caplog.text
    # the broker's liveness watchdog may warn of a pause of the loaded broker: not the import's doing
    faults = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("streams")
              and r.name != "streams.broker.watchdog"]
    assert not faults, faults


async def test_an_import_stopped_after_taking_its_batch_id_is_finished_by_running_it_again(
        kafka, unique_prefix, tmp_path):
    settings = run_settings(unique_prefix)
    common = ("--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    code, _, err = await _combee("playbook", "import", str(SAMPLE), "--playbook", "other", *common)
    assert code == 0, err  # creates the run's topics; now "fin" gets only its manifest, as if the import died
    half = seed_version("fin", parse_ace(SAMPLE.read_text()).entries(1), None, target_batch_size=40, now=utc_now())
    producer = await start_producer(kafka.bootstrap, kafka.profile)
    try:
        await producer.send_and_wait(settings.topic("batches"), half.manifest.to_json_bytes(), key=b"fin")
    finally:
        await producer.stop()
    other = tmp_path / "other.txt"
    other.write_text("## OTHERS\n[oth-00001] helpful=0 harmful=0 :: something else\n")
    code, _, err = await _combee("playbook", "import", str(other), "--playbook", "fin", *common)
    assert code == 2 and f"unfinished import ({half.import_id}) holds batch 0" in err
    code, out, err = await _combee("playbook", "import", str(SAMPLE), "--playbook", "fin", *common)
    assert code == 0, err
    assert out.startswith("finished an earlier import: fin v1")
    code, out, err = await _combee("playbook", "export", "--playbook", "fin", *common)
    assert code == 0 and out == SAMPLE.read_text(encoding="utf-8")


async def test_export_of_a_run_that_does_not_exist_says_so(kafka, unique_prefix):
    code, out, err = await _combee("playbook", "export", "--bootstrap", kafka.bootstrap, "--prefix", unique_prefix)
    assert code == 2 and out == ""
    assert f"no topic {unique_prefix}playbook" in err and "no run with prefix" in err


async def test_run_export_of_a_prefix_that_does_not_exist_fails_and_names_it(kafka, unique_prefix, tmp_path):
    out = tmp_path / "run.jsonl"
    code, stdout, err = await _combee("export", "--out", str(out), "--bootstrap", kafka.bootstrap,
                                      "--prefix", unique_prefix)
    assert code == 2 and "wrote" not in stdout and not out.exists()
    assert f"no topics with prefix {unique_prefix} on {kafka.bootstrap}: no run with that prefix" in err
