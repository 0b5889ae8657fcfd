"""``combee playbook import`` (seed a playbook from ACE text or a version's JSON) and ``combee playbook export``
(a version as ACE text, JSON or Markdown)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from combee_core.models import PlaybookEntry, PlaybookVersion
from combee_core.runs.ace_format import AceFormatError, parse_ace, render_ace, section_heading
from combee_core.topology import Topic
from streams.cli.flags import add_common, settings_from_args
from streams.cli.running import broker_for

FORMATS = ("ace", "json", "markdown")


def add_parser(subparsers) -> None:
    playbook = subparsers.add_parser("playbook", help="import a playbook (ACE text, JSON) as a version, or export one")
    actions = playbook.add_subparsers(dest="action", required=True)

    load = actions.add_parser("import", help="publish a playbook file as the next version of a playbook")
    add_common(load, run=False)
    load.add_argument("file", help="ACE playbook text (## SECTION, [id] helpful=X harmful=Y :: content), or a "
                      "version's JSON with --format json")
    load.add_argument("--playbook", required=True, help="playbook id to seed")
    load.add_argument("--format", choices=("ace", "json"), default="ace", help="format of FILE (default ace)")
    load.add_argument("--partitions", type=int, help="partitions of scaled topics, when the import creates the run's "
                      "topics (seeding before any worker ran)")
    load.set_defaults(handler=cmd_import)

    lift = actions.add_parser("lift", help="propose entries of a child playbook up to its parent (the parent's next "
                              "version, a candidate like any other: docs/scopes.md)")
    add_common(lift, run=False)
    lift.add_argument("--from", dest="child", required=True, help="child playbook id")
    lift.add_argument("--to", dest="parent", required=True, help="parent playbook id")
    lift.add_argument("--entry", dest="entries", action="append", required=True, help="entry id of the child's "
                      "latest version (repeat for several)")
    lift.set_defaults(handler=cmd_lift)

    dump = actions.add_parser("export", help="write one version of a playbook as ACE text, JSON or Markdown")
    add_common(dump, run=False)
    dump.add_argument("--playbook", help="playbook id (optional when the run has one)")
    dump.add_argument("--format", choices=FORMATS, default="ace", help="ace (default), json (the PlaybookVersion "
                      "as published) or markdown")
    dump.add_argument("--version", type=int, help="version number (default: the latest)")
    dump.add_argument("--out", help="file to write (default: standard output)")
    dump.set_defaults(handler=cmd_export)


def load_entries(path: str, fmt: str) -> tuple[list[PlaybookEntry], list[str]]:
    """Entries of a playbook file and notes on what a round trip will not keep. Raises ``AceFormatError`` or
    ``ValueError`` for a file that is not one."""
    text = Path(path).read_text(encoding="utf-8")
    if fmt == "json":
        return list(PlaybookVersion.model_validate_json(text).entries), []
    ace = parse_ace(text)
    return ace.entries(1), ace.notes


def render_markdown(version: PlaybookVersion) -> str:
    """A readable page: title, provenance, then each section with its entries, their counters and outcome credit
    (``combee_core.playbook.outcomes``) and their aliases (``combee_core.playbook.aliases``), then the corrections
    pending against entries."""
    from combee_core.playbook.outcomes import credit

    lines = [f"# Playbook {version.playbook_id}, version {version.version}", "",
             f"{len(version.entries)} entries; built on version {version.parent_version} from "
             f"{len(version.lineage)} trace(s); published {version.published_at.isoformat()}; "
             f"content hash `{version.content_hash[:12]}`."]
    section = None
    for entry in version.entries:
        if entry.section != section:
            section = entry.section
            lines += ["", f"## {section_heading(section)}", ""]
        lines.append(f"- **{entry.entry_id}** (helpful {entry.helpful}, harmful {entry.harmful}; outcome "
                     f"{credit(entry.outcome, version.baseline).describe()}): {' '.join(entry.content.split())}")
        lines += [f"  - alias (folded on closeness alone, no counter): {' '.join(alias.split())}"
                  for alias in entry.aliases]
    if version.challenges:
        lines += ["", "## Pending corrections", ""]
        lines += [f"- against **{c.entry_id}** (support {c.support} traces, v{c.first_version}-v{c.last_version}; "
                  f"{c.why}): {' '.join(c.content.split())}" for c in version.challenges]
    return "\n".join(lines) + "\n"


def render(version: PlaybookVersion, fmt: str) -> str:
    if fmt == "ace":
        return render_ace(version.entries)
    if fmt == "json":
        return version.model_dump_json(indent=2) + "\n"
    return render_markdown(version)


def _fail(command: str, error: Exception) -> int:
    print(f"combee playbook {command}: {error}", file=sys.stderr)
    return 2


async def cmd_import(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from streams.runs.playbook_io import PlaybookIOError, import_playbook
    from streams.topology.worker import ensure_topics

    settings = settings_from_args(args)
    try:
        entries, notes = load_entries(args.file, args.format)
    except (AceFormatError, ValidationError, ValueError) as error:
        return _fail("import", ValueError(f"{args.file}: {str(error).splitlines()[0]}"))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    try:
        async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
            await ensure_topics(settings, bootstrap, connection=profile.connection)
            result = await import_playbook(settings, bootstrap, profile, args.playbook, entries)
    except PlaybookIOError as error:
        return _fail("import", error)
    version = result.seeded.version
    done = "finished an earlier import: " if result.resumed else ""
    print(f"{done}{args.playbook} v{version.version} published on {settings.topic(Topic.PLAYBOOK)}: "
          f"{len(version.entries)} entries ({result.seeded.import_id})")
    return 0


async def cmd_lift(args: argparse.Namespace) -> int:
    from streams.runs.playbook_io import PlaybookIOError, lift_to_parent, require_run_topics

    settings = settings_from_args(args)
    try:
        async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
            await require_run_topics(settings, bootstrap, (Topic.PLAYBOOK, Topic.BATCHES),
                                     connection=profile.connection)
            result = await lift_to_parent(settings, bootstrap, profile, args.child, args.parent, args.entries)
    except PlaybookIOError as error:
        return _fail("lift", error)
    version = result.seeded.version
    print(f"{args.parent} v{version.version} published with {len(version.entries)} entries, "
          f"{len(args.entries)} proposed from {args.child} ({result.seeded.import_id})")
    return 0


async def cmd_export(args: argparse.Namespace) -> int:
    from streams.runs.playbook_io import PlaybookIOError, pick_version, read_versions, require_run_topics

    settings = settings_from_args(args)
    try:
        async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
            await require_run_topics(settings, bootstrap, (Topic.PLAYBOOK,), connection=profile.connection)
            version = pick_version(await read_versions(settings, bootstrap, profile), args.playbook, args.version)
    except PlaybookIOError as error:
        return _fail("export", error)
    text = render(version, args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {version.playbook_id} v{version.version} ({args.format}) to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
