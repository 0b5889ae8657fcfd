"""Review: a reviewer's decision on proposed playbook entries, one record of the ``review`` topic."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal, Self

import orjson
from pydantic import Field, model_validator

from combee_core.models.base import (
    SCHEMA_VERSION,
    CombeeModel,
    EntryId,
    InsightText,
    PersonName,
    PlaybookId,
    SectionName,
    Timestamp,
)
from combee_core.models.operations import UpdateOp

MAX_REVIEW_ITEMS = 200
"""Entries one (bulk) decision may name (with their text, a record stays under 512 KiB)."""
MAX_REVIEW_NOTE_CHARS = 2_000

def proposal_digest(section: str, content: str) -> str:
    """What a reviewer decides on: an entry's section and text (16 hex of sha256). The same text in a later version
    is the same proposal, so a decision holds until the pipeline changes the entry."""
    return hashlib.sha256(orjson.dumps([section, content])).hexdigest()[:16]


class ReviewItem(CombeeModel):
    """One entry as the reviewer read it (its text is kept: a decision says what exactly was approved)."""

    entry_id: EntryId
    version: int = Field(ge=1, description="The version the entry was read in.")
    section: SectionName
    content: InsightText

    @property
    def proposal(self) -> str:
        """proposal_digest(section, content): the proposal decided on."""
        return proposal_digest(self.section, self.content)


DecisionId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]


class ReviewDecision(CombeeModel):
    """A reviewer's approve, reject (with a note) or edit of proposed entries (several at once: a bulk decision),
    or the undo of an earlier decision. An edit is an ordinary ``UPDATE`` operation of one entry, attributed to the
    reviewer; agents are served its content instead of the proposal's. Decisions apply in log order; the latest on a
    proposal counts. An undo (``undoes``: the decision's id; ``items``: that decision's, as it named them) takes the
    decision out of the fold, as if it had never been made: each of its proposals goes back to the decision before
    it, or to undecided."""

    schema_version: Literal[1] = SCHEMA_VERSION
    decision_id: DecisionId = Field(
        description="decision_hash()[:32]: a function of the record, so a re-sent record is the same decision.")
    playbook_id: PlaybookId
    action: Literal["approve", "reject", "edit", "undo"]
    items: Annotated[list[ReviewItem], Field(min_length=1, max_length=MAX_REVIEW_ITEMS)]
    note: Annotated[str, Field(max_length=MAX_REVIEW_NOTE_CHARS)] = Field(
        default="", description="Why (required to reject).")
    edit: UpdateOp | None = Field(default=None, description="With action edit: the operation, on the one item.")
    undoes: DecisionId | None = Field(default=None, description=(
        "With action undo (and only then): the decision_id of the decision taken back (an approve, reject or edit "
        "of the same playbook). Absent from decision_hash when null, so records written before undo keep their id."))
    reviewer: PersonName = Field(description="Who decided, as they wrote it (\"Jane Doe\", user@host).")
    decided_at: Timestamp

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.action == "reject" and not self.note.strip():
            raise ValueError("a rejection needs a note saying why")
        if (self.action == "edit") != (self.edit is not None):
            raise ValueError("an edit (and only an edit) carries the edit operation")
        if (self.action == "undo") != (self.undoes is not None):
            raise ValueError("an undo (and only an undo) names the decision it takes back")
        if self.edit is not None and (len(self.items) != 1 or self.items[0].entry_id != self.edit.entry_id):
            raise ValueError("an edit names exactly one entry, the one its operation updates")
        if self.decision_id != self.decision_hash()[:32]:
            raise ValueError("decision_id is not decision_hash()[:32] of the record")
        return self

    def decision_hash(self) -> str:
        """sha256 of every field but decision_id (sorted-key JSON)."""
        return hashlib.sha256(orjson.dumps(_payload(self.model_dump(mode="json")),
                                           option=orjson.OPT_SORT_KEYS)).hexdigest()

    @classmethod
    def make(cls, **fields: Any) -> ReviewDecision:
        """Build a decision with its decision_id computed (every other field as given)."""
        payload = _payload(cls.model_construct(decision_id="", **fields).model_dump(mode="json"))
        digest = hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
        return cls.model_validate({**payload, "decision_id": digest[:32]})


def _payload(dumped: dict[str, Any]) -> dict[str, Any]:
    dumped.pop("decision_id", None)
    if dumped.get("undoes") is None:  # not hashed when absent: a decision's id is what it was before undo existed
        dumped.pop("undoes", None)
    return dumped

