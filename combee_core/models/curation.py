"""What curation carries from one version to the next, inside the version itself (so a restarted reducer, or a
replay, decides as one that never stopped): the changes of the last versions (the rolling change budget) and the
pairs a reducer call explicitly kept apart."""

from __future__ import annotations

from pydantic import Field

from combee_core.models.base import CombeeModel, EntryId, InsightText


class ChangedEntry(CombeeModel):
    """An entry of the version a batch applied to that the batch rewrote or removed."""

    entry_id: EntryId
    created_version: int = Field(ge=0)
    removed: bool = Field(description="Deleted, merged away, superseded or evicted (not only rewritten).")


class VersionChanges(CombeeModel):
    """The entries one version changed (``combee_core.reduce.rolling``)."""

    version: int = Field(ge=1)
    changed: list[ChangedEntry] = Field(default_factory=list)


class KeptApart(CombeeModel):
    """A lesson the judge called the entry's lesson on closeness in meaning alone, which a reducer call explicitly
    kept as another lesson (``AddOp.distinct_from``): not asked again, never merged into it by that closeness."""

    entry_id: EntryId
    content: InsightText
    version: int = Field(ge=1, description="The version whose reducer call decided.")


class CurationState(CombeeModel):
    """Curation's memory, carried forward version to version (derived from the versions' own operations)."""

    recent_changes: list[VersionChanges] = Field(
        default_factory=list, description="The entries changed by each of the last versions (at most "
        "playbook_rolling_versions of them), oldest first: what the rolling change budget counts.")
    kept_apart: list[KeptApart] = Field(
        default_factory=list, description="Pairs a reducer call explicitly kept apart, while their entry exists, "
        "sorted by (entry_id, content).")
