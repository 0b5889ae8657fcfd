"""``combee export``, ``combee replay`` and ``combee diff``: archive a run, rerun it, compare version sequences."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime

from combee_core.models import PromotionDecision
from combee_core.promote.promotion import compare_decisions
from combee_core.runs.archive import ArchiveError, read_archive
from combee_core.runs.diff import diff_versions
from combee_core.runs.replay import ReplayError, TraceSelection
from combee_core.topology import Topic
from streams.cli.flags import add_common, add_connection, add_pipeline, connection_overrides, settings_from_args
from streams.cli.running import broker_for
from streams.topology.readable import readable


def add_parser(subparsers) -> None:
    export = subparsers.add_parser("export", help="write topics of a run to a JSONL archive")
    add_common(export, run=False, run_id=True)
    recorded = export.add_argument_group(
        "the recorded run's settings", "written to the archive's header, which `combee replay` reruns the run with "
        "(default: the COMBEE_* environment, as when the run was started)")
    recorded.add_argument("--seed", dest="run_seed", type=int, help="the run's seed")
    add_pipeline(recorded, llm_record=False)
    export.add_argument("--out", required=True, help="archive file to write (JSONL)")
    export.add_argument("--topics", help="comma-separated logical topics (default: all of the run's topics)")
    export.set_defaults(handler=cmd_export)

    replay = subparsers.add_parser(
        "replay", help="rerun a recorded run (archive, or traces topic range) into a fresh topic prefix"
    )
    source = replay.add_argument_group("source (an archive, or the run with --prefix on the broker)")
    source.add_argument("--archive", help="archive written by `combee export`")
    source.add_argument("--bootstrap", help="Kafka bootstrap servers (env COMBEE_KAFKA_BOOTSTRAP); none -> the "
                        "broker `combee broker` runs on this machine")
    add_connection(replay)
    source.add_argument("--embedded", action="store_true",
                        help="without --bootstrap: replay into a throwaway in-memory broker (an archive only)")
    source.add_argument("--prefix", dest="topic_prefix", help="topic prefix of the recorded run (without --archive)")
    source.add_argument("-p", "--copies", dest="p", type=int, help="the recorded run's p (without --archive)")
    pick = replay.add_argument_group("which traces (offsets per partition of the traces topic; record times)")
    pick.add_argument("--from-offset", type=int, help="first offset to replay (inclusive)")
    pick.add_argument("--to-offset", type=int, help="offset to stop at (exclusive)")
    pick.add_argument("--since", type=_timestamp, help="first record time (ISO 8601 with timezone, inclusive)")
    pick.add_argument("--until", type=_timestamp, help="record time to stop at (exclusive)")
    target = replay.add_argument_group("the new run")
    target.add_argument("--into", help="topic prefix of the new run (default <prefix>replay-<random>.)")
    target.add_argument("--new-run-id", help="run id of the new run (default: the last part of its prefix, "
                        "replay-<random>)")
    target.add_argument("--seed", dest="run_seed", type=int,
                        help="run seed (default: the recorded run's; another seed is a deliberate change)")
    target.add_argument("--batch-size", type=int,
                        help="batch by this size instead of following the recorded batches (a deliberate change)")
    target.add_argument("--llm-record", choices=["auto", "off", "replay"], default="auto",
                        help="replay: answer LLM calls from the record, fail on a miss; off: call the models; "
                             "auto (default): replay when calls were recorded")
    target.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the replayed versions")
    replay.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    replay.set_defaults(handler=cmd_replay)

    diff = subparsers.add_parser("diff", help="compare the playbook versions of two runs; report the first difference")
    diff.add_argument("run_a", metavar="RUN_A", help="archive path, or topic prefix on the broker")
    diff.add_argument("run_b", metavar="RUN_B", help="archive path, or topic prefix on the broker")
    diff.add_argument("--bootstrap", help="Kafka bootstrap servers for topic prefixes (env COMBEE_KAFKA_BOOTSTRAP); "
                      "none -> the broker `combee broker` runs on this machine")
    add_connection(diff)
    diff.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    diff.set_defaults(handler=cmd_diff)


def _timestamp(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from error
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no timezone (add Z or +00:00)")
    return moment


def _names_a_file(run: str) -> bool:
    """A RUN that can only be a file (a path, or an archive's extension), never a topic prefix."""
    return os.sep in run or run.endswith((".jsonl", ".json", ".gz"))


def _fail(command: str, error: Exception | str) -> int:
    print(f"combee {command}: {error}", file=sys.stderr)
    return 2


async def cmd_export(args: argparse.Namespace) -> int:
    from streams.broker.admin import list_topics
    from streams.runs.replay import ALL_TOPICS, export_run

    settings = settings_from_args(args)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else list(ALL_TOPICS)
    try:
        async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
            existing = set(await list_topics(bootstrap, settings.topic_prefix, connection=profile.connection))
            missing = [name for name in topics if name in ALL_TOPICS and settings.topic(name) not in existing]
            if len(missing) == len(topics):
                raise ReplayError(f"no topics with prefix {settings.topic_prefix} on {bootstrap}: no run with that "
                                  f"prefix (check --prefix; `combee status --prefix P` lists a run's topics)")
            if missing and args.topics:
                raise ReplayError(f"the run {settings.topic_prefix}* has no topic {', '.join(missing)}")
            if missing:
                print(f"not in the run (older runs lack them): {', '.join(missing)}", file=sys.stderr)
                topics = [name for name in topics if name not in missing]
            result = await export_run(settings, bootstrap, profile, args.out, topics)
    except ReplayError as error:
        return _fail("export", error)
    counts = ", ".join(f"{name} {count}" for name, count in result.counts.items())
    print(f"wrote {sum(result.counts.values())} record(s) of {settings.topic_prefix}* to {result.path} ({counts})")
    return 0


async def cmd_replay(args: argparse.Namespace) -> int:
    from combee_core.llm.record import CallStoreError, LLMRecordMiss  # the LLM layer and the playbook: only to run
    from combee_core.settings import CombeeSettings
    from streams.runs.replay import ReplayOptions, replay_archive, replay_from_topics, versions_of
    from streams.topology.pipeline import PipelineTimeout

    options = ReplayOptions(
        selection=TraceSelection(from_offset=args.from_offset, to_offset=args.to_offset, since=args.since,
                                 until=args.until),
        prefix=args.into,
        run_id=args.new_run_id,
        run_seed=args.run_seed,
        batch_size=args.batch_size,
        llm_record=args.llm_record,
        timeout_s=args.timeout,
        on_progress=lambda line: print(f"replay: {line}", file=sys.stderr, flush=True),
    )
    try:
        archive = read_archive(args.archive) if args.archive else None  # a bad line stops us before anything else
        broker = CombeeSettings.load(kafka_bootstrap=args.bootstrap, kafka=connection_overrides(args))
        async with broker_for(broker, embedded=args.embedded,
                              offer_embedded=args.archive is not None) as (bootstrap, profile):
            if archive is not None:
                result = await replay_archive(archive, bootstrap, profile, options)
                recorded = archive.versions()
            else:
                source = CombeeSettings.load(kafka_bootstrap=args.bootstrap, kafka=connection_overrides(args),
                                             topic_prefix=args.topic_prefix,
                                             run_seed=args.run_seed, p=args.p)
                result = await replay_from_topics(source, bootstrap, profile, options)
                recorded = await versions_of(source.topic_prefix, bootstrap, profile)
            decisions = None
            if result.settings.promotion:  # (recorded, replayed) promotion decisions
                recorded_decisions = (archive.models(Topic.PROMOTED, PromotionDecision) if archive is not None else
                                      await read_models_of(bootstrap, profile, f"{source.topic_prefix}promoted"))
                decisions = (recorded_decisions, await read_models_of(bootstrap, profile,
                                                                      result.settings.topic(Topic.PROMOTED)))
    except ArchiveError as error:
        return _fail("replay", f"{error}; nothing was replayed" if error.line else error)
    except (ReplayError, LLMRecordMiss, CallStoreError, PipelineTimeout) as error:
        return _fail("replay", error)
    plan = result.plan
    print(f"replayed {result.sent} trace(s) into {result.settings.topic_prefix}* (run id {result.settings.run_id}, "
          f"seed {result.settings.run_seed}, LLM calls: {result.llm_record}): {len(result.versions)} version(s), "
          f"{result.dead_letters} dead letter(s)")
    if plan is not None and plan.unbatched:
        print(f"not replayed: {len(plan.unbatched)} trace(s) in no recorded batch", file=sys.stderr)
    deliberate = args.run_seed is not None or args.batch_size is not None or args.llm_record == "off"
    if plan is not None and not plan.matches_recording:
        print(f"a partial selection ({plan.mismatch}): versions are not comparable with the recording")
        return 0
    if plan is not None:  # whole leading batches: compare with the recording's first versions
        expected = plan.expected_versions()
        recorded = [v for v in recorded if v.version <= expected.get(v.playbook_id, 0)]
    report = diff_versions(recorded, result.versions)
    print(("compared with the recording: " if recorded else "") + report.describe())
    decisions_differ = False
    if decisions is not None and recorded:
        difference = compare_decisions(*decisions)
        decisions_differ = difference is not None
        print("promotion decisions: " + (difference or "the same as the recording's (every field but the time)"))
    return 0 if (report.identical and not decisions_differ) or deliberate or not recorded else 1


async def cmd_diff(args: argparse.Namespace) -> int:
    from combee_core.settings import CombeeSettings
    from streams.runs.replay import versions_of

    for run in (args.run_a, args.run_b):
        if _names_a_file(run) and not os.path.exists(run):
            return _fail("diff", FileNotFoundError(f"{run}: no such archive file"))
    try:
        if all(os.path.exists(run) for run in (args.run_a, args.run_b)):
            versions = [await versions_of(run, None, None) for run in (args.run_a, args.run_b)]
        else:
            # none: the recorded `combee broker`
            settings = CombeeSettings.load(kafka_bootstrap=args.bootstrap, kafka=connection_overrides(args))
            async with broker_for(settings) as (bootstrap, profile):
                versions = [await versions_of(run, bootstrap, profile) for run in (args.run_a, args.run_b)]
    except ArchiveError as error:
        return _fail("diff", error)
    for run, found in zip((args.run_a, args.run_b), versions):
        if not found:
            where = ("the archive holds none" if os.path.exists(run) else
                     f"no archive file of that name, and no playbook topic {run}playbook with versions on the broker")
            return _fail("diff", ValueError(f"{run}: no playbook versions found ({where})"))
    report = diff_versions(*versions)
    print(report.describe())
    return 0 if report.identical else 1


async def read_models_of(bootstrap: str, profile, topic: str) -> list[PromotionDecision]:
    """The promotion decisions on a full topic name."""
    from streams.topology.topic_reader import read_topic

    return readable(await read_topic(bootstrap, profile, topic), PromotionDecision)
