"""Taking a review decision back (no Kafka): which decision an id names, whether it can be undone, and the undo
record. An undo takes its decision out of the fold (``ReviewBook``), as if it had never been made: each proposal
it decided goes back to the decision before it on that proposal, or to undecided; what agents are served follows at
once. Review decisions only filter what is served, never the versions the pipeline builds, so every decision that
still counts can be undone; an undo itself cannot (decide again instead), nor can a decision already undone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import ValidationError

from combee_core.models import ReviewDecision
from combee_core.serve.review import ReviewInputError, load_book
from combee_core.serve.review_errors import plain_problem

MIN_PREFIX = 6
"""The fewest hex digits of a decision id that name it (``combee review`` prints 12)."""


def find_decision(playbook_id: str, decisions: Sequence[ReviewDecision], given: str) -> ReviewDecision:
    """The playbook's decision whose id is or starts with ``given``; :class:`ReviewInputError` (one line) when none
    or several do."""
    given = given.strip().lower()
    if len(given) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in given):
        raise ReviewInputError(f"{given!r} is not a decision id: give at least {MIN_PREFIX} of its hex digits "
                               f"(combee review list {playbook_id} --decisions shows them)")
    found = [d for d in decisions if d.playbook_id == playbook_id and d.decision_id.startswith(given)]
    if not found:
        raise ReviewInputError(f"{playbook_id} has no review decision {given} (combee review list {playbook_id} "
                               "--decisions shows them)")
    if len(found) > 1:
        raise ReviewInputError(f"{given} names {len(found)} decisions of {playbook_id}: give more of its digits")
    return found[0]


def make_undo(playbook_id: str, decisions: Sequence[ReviewDecision], given: str, *, reviewer: str,
              decided_at: datetime, note: str = "") -> ReviewDecision:
    """The undo of the decision ``given`` names (an id or a prefix of one) among the playbook's ``decisions`` (its
    review log, in order); :class:`ReviewInputError` (one line) when it cannot be undone."""
    target = find_decision(playbook_id, decisions, given)
    short = target.decision_id[:12]
    if target.undoes is not None:
        raise ReviewInputError(f"decision {short} is itself an undo: to restore what it took back, decide again")
    book = load_book(decisions)
    undo = book.undone.get(playbook_id, {}).get(target.decision_id)
    if undo is not None:
        raise ReviewInputError(f"decision {short} was already undone by {undo.reviewer} at "
                               f"{undo.decided_at:%Y-%m-%d %H:%M:%S} UTC")
    try:
        return ReviewDecision.make(playbook_id=playbook_id, action="undo", items=list(target.items),
                                   note=note.strip(), edit=None, undoes=target.decision_id, reviewer=reviewer,
                                   decided_at=decided_at)
    except ValidationError as error:
        raise ReviewInputError(f"cannot undo: {plain_problem(error)}") from error


def undoable(playbook_id: str, decisions: Sequence[ReviewDecision]) -> set[str]:
    """The ids of the playbook's decisions an undo may still take back (the page offers Undo on these)."""
    book = load_book(decisions)
    return {d.decision_id for d in book.decisions.get(playbook_id, [])
            if d.undoes is None and d.decision_id not in book.undone.get(playbook_id, {})}
