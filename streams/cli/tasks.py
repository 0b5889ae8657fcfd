"""``combee tasks add NAME FILE``, ``combee tasks list`` and ``combee tasks show NAME[@VERSION]``: held-out task sets
on the ``task-sets`` topic, which the promoter scores candidates on (``COMBEE_HELD_OUT_SETS``; docs/operations.md,
"Gating on your own tasks")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from combee_core.promote.task_sets import TaskSetError, check_name, load_tasks
from streams.cli.flags import add_common, settings_from_args
from streams.cli.promote import operator_name
from streams.cli.running import broker_for


def add_parser(subparsers) -> None:
    tasks = subparsers.add_parser("tasks", help="held-out task sets the promoter scores candidates on")
    sub = tasks.add_subparsers(dest="tasks_command", required=True)
    add = sub.add_parser("add", help="register a task set (a new version when its tasks changed)")
    add_common(add, run=False)
    add.add_argument("name", help="the set's name (letters, digits, '.', '_', '-')")
    add.add_argument("file", help="JSONL, one task a line: {\"id\", \"input\", \"expected\" or \"rubric\", "
                     "\"metadata\"}; '-' reads stdin")
    add.set_defaults(handler=cmd_add)
    listing = sub.add_parser("list", help="the task sets and their latest versions")
    add_common(listing, run=False)
    listing.set_defaults(handler=cmd_list)
    show = sub.add_parser("show", help="a set's tasks, as JSONL (its latest version, or NAME@VERSION)")
    add_common(show, run=False)
    show.add_argument("ref", metavar="NAME[@VERSION]")
    show.set_defaults(handler=cmd_show)


def _read_file(path: str) -> tuple[list[str], str]:
    if path == "-":
        return sys.stdin.read().splitlines(), "stdin"
    try:
        return Path(path).read_text(encoding="utf-8").splitlines(), Path(path).name
    except (OSError, UnicodeDecodeError) as error:
        raise TaskSetError(f"{path}: cannot read it ({error})") from error


async def cmd_add(args: argparse.Namespace) -> int:
    from streams.topology.task_sets import register_task_set  # aiokafka: only when a command runs

    name = check_name(args.name)
    lines, source = _read_file(args.file)
    tasks = load_tasks(lines, source)  # every line checked before the broker is asked
    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        version, written = await register_task_set(settings, bootstrap, profile, name, tasks, source=source,
                                                   by=operator_name())
    if written:
        print(f"registered {version.label}: {len(version.tasks)} tasks (pin it with "
              f"COMBEE_HELD_OUT_SETS=PLAYBOOK={version.name} or ={version.label})")
    else:
        print(f"{version.label} already holds these {len(version.tasks)} tasks: nothing written")
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    from streams.topology.task_sets import read_registry

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        registry = await read_registry(settings, bootstrap, profile)
    if not registry.names():
        print("no task sets registered (combee tasks add NAME FILE)")
    for name in registry.names():
        latest = registry.latest(name)
        assert latest is not None
        print(f"{latest.label}\t{len(latest.tasks)} tasks\tregistered {latest.registered_at.isoformat()} by "
              f"{latest.registered_by or '?'} from {latest.source or '?'}")
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    from streams.topology.task_sets import read_registry

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        registry = await read_registry(settings, bootstrap, profile)
    version = registry.resolve(args.ref)
    if version is None:
        known = ", ".join(f"{n}@1..{max(registry.versions[n])}" for n in registry.names()) or "none"
        raise TaskSetError(f"no task set {args.ref!r} (registered: {known})")
    print(f"# {version.label}: {len(version.tasks)} tasks", file=sys.stderr)
    for task in version.tasks:
        sys.stdout.write(orjson.dumps(task.model_dump(mode="json", exclude_defaults=True)).decode() + "\n")
    return 0
