"""Review mode: agents are served only the entries a reviewer approved (no Kafka).

With review on for a playbook (``COMBEE_REVIEW_PLAYBOOKS``), every new or changed entry of a version is a
*proposal*: its section and text (``proposal_digest``). The ``review`` log holds :class:`ReviewDecision` records
(approve, reject with a note, edit), read in log order; the latest decision on a proposal counts, a record seen
twice (same ``decision_id``) counts once. :func:`reviewed_view` filters the served version (as
``PlaybookFollower`` computes it) to approved entries: an entry whose current text is approved is served; an edited
one is served with the reviewer's text; one whose change is undecided or rejected keeps its last approved text; the
others are withheld. A removal by the pipeline applies at once. Everything is a function of the logs, so replaying
them gives byte-identical results (:func:`review_state`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from combee_core.errors import CombeeError
from combee_core.models import PlaybookEntry, PlaybookVersion, ReviewDecision, ReviewItem, UpdateOp, proposal_digest
from combee_core.serve.review_errors import plain_problem

EVERY_PLAYBOOK = "*"

Status = Literal["proposed", "approved", "rejected", "superseded"]


def review_playbooks(spec: str) -> frozenset[str] | None:
    """``"demo,pb"`` -> those ids; ``"*"`` -> None (every playbook); ``""`` -> none."""
    ids = frozenset(part.strip() for part in spec.split(",") if part.strip())
    return None if EVERY_PLAYBOOK in ids else ids


def review_on(spec: str, playbook_id: str) -> bool:
    """Whether review mode is on for ``playbook_id`` under the setting ``spec``."""
    ids = review_playbooks(spec)
    return ids is None or playbook_id in ids


@dataclass
class ReviewBook:
    """The ``review`` log read in order: per playbook, the latest decision that counts on each proposal. An undo
    takes its decision out (the proposals it decided fall back to the decisions before it, or to undecided); an undo
    of a decision the log does not hold before it, of an undo, or of a decision already undone changes nothing."""

    seen: set[str] = field(default_factory=set)
    decisions: dict[str, list[ReviewDecision]] = field(default_factory=dict)
    """playbook -> every record taken (undos included), in log order."""
    undone: dict[str, dict[str, ReviewDecision]] = field(default_factory=dict)
    """playbook -> decision_id taken back -> the undo that took it back."""
    verdicts: dict[str, dict[tuple[str, str], tuple[int, ReviewItem, ReviewDecision]]] = field(default_factory=dict)
    """playbook -> (entry_id, proposal) -> (position in the log, the item, the decision)."""

    def apply(self, decision: ReviewDecision) -> bool:
        """Take one record in log order; False for a record already taken (a re-sent one)."""
        if decision.decision_id in self.seen:
            return False
        self.seen.add(decision.decision_id)
        taken = self.decisions.setdefault(decision.playbook_id, [])
        taken.append(decision)
        if decision.undoes is not None:
            if self.counting(decision.playbook_id, decision.undoes) is not None:
                self.undone.setdefault(decision.playbook_id, {})[decision.undoes] = decision
                self._refold(decision.playbook_id)
            return True
        verdicts = self.verdicts.setdefault(decision.playbook_id, {})
        for item in decision.items:
            verdicts[(item.entry_id, item.proposal)] = (len(taken), item, decision)
        return True

    def counting(self, playbook_id: str, decision_id: str) -> ReviewDecision | None:
        """The approve, reject or edit ``decision_id`` when the log holds it and it is not undone."""
        if decision_id in self.undone.get(playbook_id, {}):
            return None
        return next((d for d in self.decisions.get(playbook_id, [])
                     if d.decision_id == decision_id and d.undoes is None), None)

    def _refold(self, playbook_id: str) -> None:
        undone = self.undone.get(playbook_id, {})
        verdicts: dict[tuple[str, str], tuple[int, ReviewItem, ReviewDecision]] = {}
        for position, decision in enumerate(self.decisions.get(playbook_id, []), start=1):
            if decision.undoes is None and decision.decision_id not in undone:
                for item in decision.items:
                    verdicts[(item.entry_id, item.proposal)] = (position, item, decision)
        self.verdicts[playbook_id] = verdicts

    def verdict(self, playbook_id: str, entry: PlaybookEntry) -> ReviewDecision | None:
        """The decision that counts on ``entry``'s current text (None: undecided)."""
        found = self.verdicts.get(playbook_id, {}).get(_key(entry))
        return found[2] if found is not None else None

    def last_approved(self, playbook_id: str, entry_id: str) -> tuple[ReviewItem, ReviewDecision] | None:
        """The most recently approved (or edited) text of ``entry_id`` that is still approved."""
        best: tuple[int, ReviewItem, ReviewDecision] | None = None
        for (entry, _), found in self.verdicts.get(playbook_id, {}).items():
            if entry == entry_id and found[2].action != "reject" and (best is None or found[0] > best[0]):
                best = found
        return (best[1], best[2]) if best is not None else None


def review_marks(playbook_id: str, entries: Sequence[PlaybookEntry], book: ReviewBook) -> dict[str, str]:
    """Each entry's review state as ``combee tail`` marks it: ``approved``, ``edited``, ``rejected`` or ``awaiting
    review``; a change not approved whose entry keeps an earlier approved text says so (what agents get of it)."""
    marks = {}
    for entry in entries:
        decision = book.verdict(playbook_id, entry)
        if decision is not None and decision.action != "reject":
            marks[entry.entry_id] = "edited" if decision.action == "edit" else "approved"
            continue
        mark = "rejected" if decision is not None else "awaiting review"
        kept = book.last_approved(playbook_id, entry.entry_id) is not None
        marks[entry.entry_id] = f"{mark}; agents get the approved text before it" if kept else \
            f"{mark}; withheld from agents"
    return marks


def describe_review(decision: ReviewDecision) -> str:
    """One line on a review decision (``combee tail`` in review mode)."""
    ids = ", ".join(item.entry_id for item in decision.items)
    note = f": {decision.note}" if decision.note else ""
    undoes = f" {decision.undoes[:12]} (of" if decision.undoes else ""
    return f"{decision.playbook_id} review {decision.decision_id[:12]}: {decision.action}{undoes} {ids}" \
           f"{')' if decision.undoes else ''} by {decision.reviewer}{note}"


def load_book(decisions: Iterable[ReviewDecision]) -> ReviewBook:
    book = ReviewBook()
    for decision in decisions:
        book.apply(decision)
    return book


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReviewedEdit(_Frozen):
    """An entry served with a reviewer's text: who, by which decision."""

    entry_id: str
    reviewer: str
    decision_id: str
    content: str


class ReviewedView(_Frozen):
    """What agents are served of one version under review."""

    playbook_id: str
    version: int
    entries: list[PlaybookEntry]
    edits: list[ReviewedEdit]
    withheld: list[str]
    """Entries of the version not served (undecided or rejected, with no approved text before)."""
    held_back: list[str]
    """Entries served with an earlier approved text (their change is undecided or rejected)."""


def _approved_text(item: ReviewItem, decision: ReviewDecision) -> tuple[str, str]:
    """(section, content) an approving decision serves: the item's, or the edit's content."""
    return item.section, decision.edit.content if decision.edit is not None else item.content


def reviewed_view(playbook_id: str, version: int, entries: Sequence[PlaybookEntry],
                  book: ReviewBook) -> ReviewedView:
    """The served entries (``entries``, of ``version``) filtered to what the reviewers approved."""
    served: list[PlaybookEntry] = []
    edits: list[ReviewedEdit] = []
    withheld: list[str] = []
    held_back: list[str] = []
    for entry in entries:
        decision = book.verdict(playbook_id, entry)
        if decision is not None and decision.action != "reject":
            approved: tuple[ReviewItem, ReviewDecision] | None = (
                next(i for i in decision.items if i.entry_id == entry.entry_id), decision)
        else:
            approved = book.last_approved(playbook_id, entry.entry_id)
            if approved is None:
                withheld.append(entry.entry_id)
                continue
            held_back.append(entry.entry_id)
        assert approved is not None
        section, content = _approved_text(*approved)
        served.append(entry.model_copy(update={"section": section, "content": content}))
        if approved[1].edit is not None:
            edits.append(ReviewedEdit(entry_id=entry.entry_id, reviewer=approved[1].reviewer,
                                      decision_id=approved[1].decision_id, content=content))
    return ReviewedView(playbook_id=playbook_id, version=version, entries=served, edits=edits, withheld=withheld,
                        held_back=held_back)


class ProposalRow(_Frozen):
    """One proposal (an entry's text as some version first had it) and where review stands on it."""

    entry_id: str
    section: str
    content: str
    proposal: str
    first_version: int
    status: Status
    current: bool
    """It is the entry's text in the served version."""
    decision_id: str | None = None
    reviewer: str | None = None
    note: str = ""
    edited_to: str | None = None


def proposals(playbook_id: str, versions: Sequence[PlaybookVersion], served: Sequence[PlaybookEntry],
              book: ReviewBook) -> list[ProposalRow]:
    """Every proposal of the playbook's versions (in order of first appearance), with its status: the decision's
    (approved, edited counts as approved; rejected), else proposed while it is the served text, else superseded."""
    current = {_key(e) for e in served}
    first: dict[tuple[str, str], tuple[PlaybookEntry, int]] = {}
    for version in versions:
        for entry in version.entries:
            first.setdefault(_key(entry), (entry, version.version))
    for entry in served:  # a served entry is a proposal even when its version is not among ``versions``
        first.setdefault(_key(entry), (entry, entry.updated_version))
    rows = []
    for key, (entry, seen_in) in first.items():
        found = book.verdicts.get(playbook_id, {}).get(key)
        decision = found[2] if found is not None else None
        status: Status = ("proposed" if key in current else "superseded") if decision is None else (
            "rejected" if decision.action == "reject" else "approved")
        rows.append(ProposalRow(
            entry_id=entry.entry_id, section=entry.section, content=entry.content, proposal=key[1],
            first_version=seen_in, status=status, current=key in current,
            decision_id=decision.decision_id if decision else None, reviewer=decision.reviewer if decision else None,
            note=decision.note if decision else "",
            edited_to=decision.edit.content if decision and decision.edit else None))
    return rows


def _key(entry: PlaybookEntry) -> tuple[str, str]:
    return entry.entry_id, proposal_digest(entry.section, entry.content)


def inbox(rows: Sequence[ProposalRow]) -> list[ProposalRow]:
    """The proposals waiting for a reviewer: undecided texts of the served version."""
    return [row for row in rows if row.status == "proposed"]


def rejection_rate(rows: Sequence[ProposalRow]) -> float | None:
    """Share of decided proposals whose decision is a rejection (None before any decision)."""
    decided = [row for row in rows if row.status in ("approved", "rejected")]
    return sum(row.status == "rejected" for row in decided) / len(decided) if decided else None


class ReviewInputError(CombeeError, ValueError):
    """A decision that cannot be made: an entry the version lacks, a rejection without a note, ... (one line)."""


def items_for(version: PlaybookVersion, entry_ids: Sequence[str]) -> list[ReviewItem]:
    """The review items of ``entry_ids`` as ``version`` has them (each once, in the order given)."""
    entries = {entry.entry_id: entry for entry in version.entries}
    missing = [entry_id for entry_id in entry_ids if entry_id not in entries]
    if missing:
        raise ReviewInputError(f"{version.playbook_id} v{version.version} has no entry {', '.join(missing)}")
    if not entry_ids:
        raise ReviewInputError("name at least one entry")
    return [ReviewItem(entry_id=e.entry_id, version=version.version, section=e.section, content=e.content)
            for e in (entries[entry_id] for entry_id in dict.fromkeys(entry_ids))]


def make_decision(version: PlaybookVersion, action: str, entry_ids: Sequence[str], *, reviewer: str,
                  decided_at: datetime, note: str = "", content: str | None = None) -> ReviewDecision:
    """A reviewer's decision on entries of ``version``; :class:`ReviewInputError` (one line) when it cannot be."""
    if action not in ("approve", "reject", "edit"):
        raise ReviewInputError(f"unknown review action {action!r} (approve, reject or edit)")
    if (action == "edit") != (content is not None):
        raise ReviewInputError("an edit needs the new content (and only an edit takes one)")
    if action == "reject" and not note.strip():
        raise ReviewInputError("a rejection needs a note saying why: write it in the note field")
    items = items_for(version, entry_ids)
    try:
        edit = UpdateOp(entry_id=items[0].entry_id, content=content.strip()) if content is not None else None
        return ReviewDecision.make(playbook_id=version.playbook_id, action=action, items=items, note=note.strip(),
                                   edit=edit, reviewer=reviewer, decided_at=decided_at)
    except ValidationError as error:
        raise ReviewInputError(f"cannot {action}: {plain_problem(error)}") from error


class ReviewState(_Frozen):
    """Everything review decides for one playbook: what replays must reproduce byte for byte."""

    playbook_id: str
    served_version: int
    view: ReviewedView
    proposals: list[ProposalRow]
    decisions: list[str]
    """decision_ids taken (undos included; a re-sent record once), in log order."""
    undone: list[str] = []
    """decision_ids taken back by an undo, in the order of the undos."""
    rejection_rate: float | None

    def to_json_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def review_state(playbook_id: str, versions: Sequence[PlaybookVersion], served: PlaybookVersion | None,
                 decisions: Iterable[ReviewDecision]) -> ReviewState:
    """Fold the playbook's versions, its served version (``None``: the empty version 0) and the ``review`` log."""
    book = load_book(decisions)
    entries = list(served.entries) if served is not None else []
    rows = proposals(playbook_id, versions, entries, book)
    return ReviewState(playbook_id=playbook_id, served_version=served.version if served is not None else 0,
                       view=reviewed_view(playbook_id, served.version if served else 0, entries, book),
                       proposals=rows, decisions=[d.decision_id for d in book.decisions.get(playbook_id, [])],
                       undone=list(book.undone.get(playbook_id, {})),
                       rejection_rate=rejection_rate(rows))


class EntryChange(_Frozen):
    """How one entry differs between two served versions."""

    kind: Literal["added", "removed", "changed"]
    entry_id: str
    before: str | None
    after: str | None


def entry_changes(before: Sequence[PlaybookEntry], after: Sequence[PlaybookEntry]) -> list[EntryChange]:
    """Entries added, removed or whose section or text changed from ``before`` to ``after`` (``after``'s order,
    then the removed ones in ``before``'s)."""
    old = {entry.entry_id: entry for entry in before}
    new_ids = {entry.entry_id for entry in after}
    changes = []
    for entry in after:
        was = old.get(entry.entry_id)
        if was is None:
            changes.append(EntryChange(kind="added", entry_id=entry.entry_id, before=None, after=entry.content))
        elif (was.section, was.content) != (entry.section, entry.content):
            changes.append(EntryChange(kind="changed", entry_id=entry.entry_id, before=was.content,
                                       after=entry.content))
    changes += [EntryChange(kind="removed", entry_id=e.entry_id, before=e.content, after=None)
                for e in before if e.entry_id not in new_ids]
    return changes
