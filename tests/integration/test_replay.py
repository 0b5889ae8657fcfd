"""Reproducible reruns on the real broker: export, replay from the archive and from the traces topic, diff."""

from __future__ import annotations

import pytest

from combee_core.llm.record import LLMRecordMiss
from combee_core.models import BatchManifest
from combee_core.runs.archive import ArchiveError, read_archive
from combee_core.runs.diff import diff_versions
from combee_core.runs.replay import ReplayError, TraceSelection
from streams.broker.admin import list_topics
from streams.cli import build_parser
from streams.runs.replay import ReplayOptions, export_run, replay_archive, replay_from_topics
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces
from tests.integration.topology_support import SIZE_CLOSES_S, make_traces, run_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACES = make_traces(120)
"""3 batches of 40: the first two make the offset-range replay (2b), the third a version past that range. 200 (5
batches) proved nothing more at ~5/3 of the CPU (the run and its four replays, docs/benchmarks.md, "The suite's time,
eighth session")."""


def hashes(versions) -> list[tuple[str, int, str]]:
    return sorted((v.playbook_id, v.version, v.content_hash) for v in versions)


async def test_replays_reproduce_every_version_and_changes_show_in_diff(kafka, unique_prefix, tmp_path, capsys,
                                                                       monkeypatch):
    # Aggregator calls of 14 copies (fan-in 32) on the simulator's capacity of 12: what they keep depends on the seed,
    # so the replay under another seed (part 3) makes other versions. At the default fan-in (6) no call is over the
    # capacity, nothing is dropped at random, and another seed reproduces the same versions.
    settings = run_settings(unique_prefix, max_fan_in=32, max_wait_s=SIZE_CLOSES_S)  # 3 batches of 40, closed by size
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, TRACES)
        original = await run.wait_for(lambda vs: len(vs) >= 3, timeout_s=120, what="3 versions")
        manifests = await run.manifests()
    assert [v.version for v in original] == [1, 2, 3]

    archive_path = tmp_path / "run.jsonl"
    exported = await export_run(settings, kafka.bootstrap, kafka.profile, archive_path)
    assert exported.counts["traces"] == 120 and exported.counts["playbook"] == 3 and exported.counts["llm-calls"] > 120
    archive = read_archive(archive_path)
    assert hashes(archive.versions()) == hashes(original)

    # 1. From the archive, LLM calls answered from the record: the same versions, byte for byte.
    from_archive = await replay_archive(archive, kafka.bootstrap, kafka.profile,
                                        ReplayOptions(prefix=f"{unique_prefix}a."))
    assert from_archive.llm_record == "replay" and from_archive.settings.topic_prefix == f"{unique_prefix}a."
    assert from_archive.settings.run_id != settings.run_id
    assert hashes(from_archive.versions) == hashes(original)
    assert [v.model_dump(exclude={"published_at", "stats"}) for v in from_archive.versions] == \
        [v.model_dump(exclude={"published_at", "stats"}) for v in original]
    replayed_manifests = await read_models(_Run(from_archive.settings, kafka), "batches", BatchManifest)
    assert [m.trace_ids for m in replayed_manifests] == [m.trace_ids for m in manifests]

    # 2. From the traces topic of the recorded run, on the same broker.
    from_topic = await replay_from_topics(settings, kafka.bootstrap, kafka.profile,
                                          ReplayOptions(selection=TraceSelection(from_offset=0)))
    assert hashes(from_topic.versions) == hashes(original)

    # 2b. An offset range of the traces topic (one playbook, so one partition): the first two batches' traces give
    # the first two versions, byte for byte (`combee replay` compares them with the recording's first two).
    assert [m.n for m in manifests[:2]] == [40, 40]
    monkeypatch.setenv("COMBEE_SIM_CLOCK", "virtual")  # a broker replay takes unrecorded settings from the environment
    monkeypatch.setenv("COMBEE_MAX_FAN_IN", str(settings.max_fan_in))
    code = await _cli("replay", "--prefix", unique_prefix, "--from-offset", "0", "--to-offset", "80",
                      "--bootstrap", kafka.bootstrap)
    out, err = capsys.readouterr()
    assert code == 0 and "2 version(s)" in out and "identical: 2 version(s)" in out, out + err
    # it says what it does from the start, and the new run's prefix and run id carry the same random part
    started = next(line for line in err.splitlines() if line.startswith("replay: replaying 80 trace(s)"))
    suffix = started.split(f"into {unique_prefix}replay-", 1)[1].split(".", 1)[0]
    assert f"(run id replay-{suffix})" in started, started
    # A range that cuts a batch would make calls the record cannot answer: refused before any topic is made.
    with pytest.raises(ReplayError, match="recorded batch 1 of pb is cut: 39 of its 40 traces are selected"):
        await replay_from_topics(settings, kafka.bootstrap, kafka.profile,
                                 ReplayOptions(prefix=f"{unique_prefix}cut.", selection=TraceSelection(to_offset=79)))
    assert await list_topics(kafka.bootstrap, f"{unique_prefix}cut.") == []

    # `combee diff` agrees: an archive against a topic prefix on the broker.
    code = await _cli("diff", str(archive_path), from_topic.settings.topic_prefix, "--bootstrap", kafka.bootstrap)
    assert code == 0 and "identical: 3 version(s)" in capsys.readouterr().out

    # 3. Another seed (calling the simulator again): other versions, and diff says where.
    other_seed = await replay_archive(archive, kafka.bootstrap, kafka.profile,
                                      ReplayOptions(run_seed=1, llm_record="off"))
    report = diff_versions(original, other_seed.versions)
    assert not report.identical
    first_changed = next(a.version for a, b in zip(original, sorted(other_seed.versions, key=lambda v: v.version))
                         if a.content_hash != b.content_hash)
    assert (report.first.playbook_id, report.first.version) == ("pb", first_changed)
    assert {d.aspect for d in report.first.differences} & {"operation", "entry"}
    code = await _cli("diff", str(archive_path), other_seed.settings.topic_prefix, "--bootstrap", kafka.bootstrap)
    out = capsys.readouterr().out
    assert code == 1 and f"first difference: playbook pb version {first_changed}" in out


async def test_replay_fails_loudly_on_a_recorded_call_miss_and_on_a_corrupted_archive(kafka, unique_prefix, tmp_path,
                                                                                      capsys):
    settings = run_settings(unique_prefix)
    traces = TRACES[:40]
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, traces)
        await run.wait_for(lambda vs: len(vs) >= 1, timeout_s=60, what="1 version")
    path = tmp_path / "run.jsonl"
    await export_run(settings, kafka.bootstrap, kafka.profile, path, ["traces", "batches", "playbook", "llm-calls"])

    # Another batch size changes the aggregator calls: not in the record, so the replay stops, naming the call.
    with pytest.raises(LLMRecordMiss, match=r"no recorded answer for the aggregator call to 'combee-sim/default'"):
        await replay_archive(read_archive(path), kafka.bootstrap, kafka.profile,
                             ReplayOptions(batch_size=25, llm_record="replay", timeout_s=60))

    # A corrupted line: rejected with its number before any topic of the new run exists.
    lines = path.read_bytes().split(b"\n")
    lines[9] = lines[9].replace(b'"trace_id":"', b'"trace_id":"X', 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(ArchiveError, match="line 10: checksum mismatch") as caught:
        read_archive(bad)
    assert caught.value.line == 10
    into = f"{unique_prefix}bad."
    code = await _cli("replay", "--archive", str(bad), "--bootstrap", kafka.bootstrap, "--into", into)
    err = capsys.readouterr().err
    assert code == 2 and "line 10: checksum mismatch" in err and "nothing was replayed" in err
    assert await list_topics(kafka.bootstrap, into) == []


class _Run:
    """Enough of a pipeline for ``read_models``: settings and broker."""

    def __init__(self, settings, kafka) -> None:
        self.settings, self.bootstrap, self.profile = settings, kafka.bootstrap, kafka.profile


async def _cli(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    return int(await args.handler(args) or 0)
