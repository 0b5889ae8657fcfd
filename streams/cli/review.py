"""``combee review list|approve|reject|edit|undo``: review proposed playbook entries from the command line (review
mode, docs/review.md); each decision (and each undo of one) is a record on the ``review`` topic, with who and why."""

from __future__ import annotations

import argparse

from combee_core.models import utc_now
from combee_core.serve.review import ReviewInputError, describe_review, inbox, make_decision, review_on
from combee_core.serve.review_undo import make_undo
from streams.cli.flags import add_common, settings_from_args
from streams.cli.promote import operator_name
from streams.cli.running import broker_for


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    review = subparsers.add_parser("review", help="list, approve, reject or edit proposed playbook entries "
                                   "(review mode)")
    actions = review.add_subparsers(dest="review_action", required=True)
    listing = actions.add_parser("list", help="the inbox: proposed entries of the served version")
    add_common(listing, run=False)
    listing.add_argument("playbook", help="playbook id")
    listing.add_argument("--all", action="store_true", help="every proposal with its status, not only the inbox")
    listing.add_argument("--decisions", action="store_true", help="the review log instead: each decision with its "
                         "id (what `combee review undo` takes), newest last, and which are undone")
    listing.set_defaults(handler=cmd_list)
    undo = actions.add_parser("undo", help="take a decision back: its entries return to the decision before it, or "
                              "to the inbox")
    add_common(undo, run=False)
    undo.add_argument("playbook", help="playbook id")
    undo.add_argument("decision", help="the decision's id, or at least 6 of its first hex digits (list --decisions)")
    undo.add_argument("--note", default="", help="why (optional)")
    undo.add_argument("--reviewer", help="who takes it back (default user@host)")
    undo.set_defaults(handler=cmd_undo)
    for action, text in (("approve", "serve these entries to agents"), ("reject", "keep these entries from agents"),
                         ("edit", "serve this entry with your text instead")):
        parser = actions.add_parser(action, help=text)
        add_common(parser, run=False)
        parser.add_argument("playbook", help="playbook id")
        parser.add_argument("entries", nargs=1 if action == "edit" else "+", metavar="ENTRY", help="entry id(s)")
        parser.add_argument("--version", type=int, help="the version the entries are read in (default: the "
                            "version agents are served)")
        parser.add_argument("--note", default="", required=action == "reject", help="why (required to reject)")
        if action == "edit":
            parser.add_argument("--content", required=True, help="the entry's new text")
        parser.add_argument("--reviewer", help="who decides (default user@host)")
        parser.set_defaults(handler=cmd_decide, action=action)


async def cmd_list(args: argparse.Namespace) -> int:
    from streams.review.log import read_snapshot

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        snapshot = await read_snapshot(settings, bootstrap, profile, args.playbook)
    state = snapshot.state
    mode = "on" if review_on(settings.review_playbooks, args.playbook) else "off (COMBEE_REVIEW_PLAYBOOKS)"
    rate = "no decision yet" if state.rejection_rate is None else f"{state.rejection_rate:.0%} rejected"
    if args.decisions:
        undone = set(state.undone)
        for decision in snapshot.decisions:
            mark = "  [undone]" if decision.decision_id in undone else ""
            print(f"{decision.decision_id[:12]} {decision.decided_at:%Y-%m-%d %H:%M:%S} "
                  f"{describe_review(decision).split(': ', 1)[1]}{mark}")
        return 0
    rows = state.proposals if args.all else inbox(state.proposals)
    print(f"{args.playbook}: served v{state.served_version}, {len(state.view.entries)} of "
          f"{len(snapshot.served.entries) if snapshot.served else 0} entries approved for agents; review {mode}; "
          f"{len(inbox(state.proposals))} proposed; {rate}")
    for row in rows:
        status = f"{row.status:<10} " if args.all else ""
        note = f"  ({row.reviewer}: {row.note})" if row.note else ""
        print(f"{status}{row.entry_id:<12} v{row.first_version:<4} [{row.section}] {row.content}{note}")
    return 0


async def cmd_decide(args: argparse.Namespace) -> int:
    from streams.review.log import read_snapshot, write_decision

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        snapshot = await read_snapshot(settings, bootstrap, profile, args.playbook)
        if args.version is None and snapshot.served is None:
            raise ReviewInputError(f"{args.playbook} serves no version yet: nothing to review (check the id and "
                                   "--prefix)")
        version = snapshot.version(args.version) if args.version is not None else snapshot.served
        assert version is not None
        decision = make_decision(version, args.action, args.entries, reviewer=args.reviewer or operator_name(),
                                 decided_at=utc_now(), note=args.note, content=getattr(args, "content", None))
        await write_decision(settings, bootstrap, profile, decision)
    ids = ", ".join(item.entry_id for item in decision.items)
    print(f"{decision.playbook_id} v{version.version}: {decision.action} {ids} by {decision.reviewer} "
          f"(decision {decision.decision_id[:12]})")
    return 0


async def cmd_undo(args: argparse.Namespace) -> int:
    from streams.review.log import read_snapshot, write_decision

    settings = settings_from_args(args)
    async with broker_for(settings, embedded=args.embedded) as (bootstrap, profile):
        snapshot = await read_snapshot(settings, bootstrap, profile, args.playbook)
        undo = make_undo(args.playbook, snapshot.decisions, args.decision, reviewer=args.reviewer or operator_name(),
                         decided_at=utc_now(), note=args.note)
        await write_decision(settings, bootstrap, profile, undo)
    assert undo.undoes is not None
    ids = ", ".join(item.entry_id for item in undo.items)
    print(f"{undo.playbook_id}: undid decision {undo.undoes[:12]} on {ids} by {undo.reviewer} "
          f"(decision {undo.decision_id[:12]})")
    return 0
