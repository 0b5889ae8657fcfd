"""A playbook version made from outside the pipeline (``combee playbook import``): a proper ``PlaybookVersion``.

Versions and batch ids move together: batch b is applied to version b and gives version b+1 (``docs/protocol.md``).
So a seeded version v+1 also takes batch id v, with a :class:`BatchManifest` of one pseudo-trace, the import's id
(``import:<digest>``), which is also the version's lineage. Every reader then sees an ordinary version: the batcher
numbers the next batch v+1, the reducer builds on the seeded entries, ``combee_core.runs.audit`` finds the batch's one
"trace" in exactly one lineage. The operations say what changed from the parent version: an ADD per new entry id, an
UPDATE per entry whose content changed, a DELETE per entry that is gone; counters are the imported ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import orjson

from combee_core.models import (
    AddOp,
    AppliedOperation,
    BatchManifest,
    CurationState,
    DeleteOp,
    OutcomeTally,
    PlaybookEntry,
    PlaybookVersion,
    UpdateOp,
    VersionStats,
)
from combee_core.playbook import Playbook, playbook_tokens
from combee_core.playbook.challenges import standing

IMPORT_PREFIX = "import:"


@dataclass(frozen=True)
class SeededVersion:
    manifest: BatchManifest
    version: PlaybookVersion

    @property
    def import_id(self) -> str:
        return self.manifest.trace_ids[0]


def is_import_manifest(manifest: BatchManifest) -> bool:
    """A batch taken by an import rather than formed from traces."""
    return len(manifest.trace_ids) == 1 and manifest.trace_ids[0].startswith(IMPORT_PREFIX)


def is_import_version(version: PlaybookVersion) -> bool:
    """A version written by an import rather than by a reducer."""
    return len(version.lineage) == 1 and version.lineage[0].startswith(IMPORT_PREFIX)


def carried_curation(parent: PlaybookVersion | None, kept_ids: set[str]) -> CurationState:
    """Curation's memory across an import: the rolling change history goes on (an import is the operator's change,
    not a batch's, so it does not count against the budget, nor does it reset it), and pairs kept apart stay so while
    their entry is kept."""
    if parent is None:
        return CurationState()
    return parent.curation.model_copy(update={
        "kept_apart": [pair for pair in parent.curation.kept_apart if pair.entry_id in kept_ids]})


def seed_version(
    playbook_id: str,
    entries: list[PlaybookEntry],
    parent: PlaybookVersion | None,
    *,
    target_batch_size: int,
    now: datetime,
) -> SeededVersion:
    """The manifest and version that make ``entries`` (ids and counters as given) the next version after ``parent``
    (None: the playbook has no version yet). Deterministic but for the timestamps."""
    parent_version = parent.version if parent is not None else 0
    new_version = parent_version + 1
    old = {e.entry_id: e for e in parent.entries} if parent is not None else {}
    kept: list[PlaybookEntry] = []
    operations: list[AppliedOperation] = []
    for entry in entries:
        before = old.get(entry.entry_id)
        if before is None:
            operations.append(AppliedOperation(operation=AddOp(section=entry.section, content=entry.content),
                                               outcome="applied", reason="imported", entry_id=entry.entry_id))
            kept.append(entry.model_copy(update={"created_version": new_version, "updated_version": new_version}))
            continue
        changed = (before.content, before.section, before.helpful, before.harmful) != (
            entry.content, entry.section, entry.helpful, entry.harmful)
        if before.content != entry.content:
            operations.append(AppliedOperation(operation=UpdateOp(entry_id=entry.entry_id, content=entry.content),
                                               outcome="applied", reason="imported", entry_id=entry.entry_id))
        kept.append(entry.model_copy(update={
            "created_version": before.created_version,
            "updated_version": new_version if changed else before.updated_version,
            # a file without outcome counts (ACE text) keeps those of the same text
            "outcome": entry.outcome if entry.outcome != OutcomeTally() or before.content != entry.content
            else before.outcome}))
    for entry_id in sorted(set(old) - {e.entry_id for e in entries}):
        operations.append(AppliedOperation(operation=DeleteOp(entry_id=entry_id), outcome="applied",
                                           reason="not in the import", entry_id=entry_id))
    playbook = Playbook.from_entries(playbook_id, new_version, kept,
                                     parent.next_entry_number if parent is not None else None)
    baseline = parent.baseline if parent is not None else OutcomeTally()  # the traces' outcomes go on counting
    challenges = list(standing(parent.challenges, kept)) if parent is not None else []
    curation = carried_curation(parent, {e.entry_id for e in kept})
    ordered = list(playbook.entries)
    digest = hashlib.sha256(orjson.dumps(
        [playbook_id, parent_version, [e.model_dump(mode="json") for e in ordered]])).hexdigest()[:24]
    import_id = f"{IMPORT_PREFIX}{digest}"
    manifest = BatchManifest(
        playbook_id=playbook_id, batch_id=parent_version, base_version=parent_version, trace_ids=[import_id],
        reflection_ids=[import_id], n=1, k=1, p=1, seed=0, subgroup_sizes=[1],
        target_batch_size=target_batch_size, closed_by="size", closed_at=now,
    )
    lineage = [import_id]
    version = PlaybookVersion(
        playbook_id=playbook_id,
        version=new_version,
        parent_version=parent_version,
        batch_id=parent_version,
        entries=ordered,
        next_entry_number=playbook.next_entry_number,
        operations=operations,
        lineage=lineage,
        baseline=baseline,
        challenges=challenges,
        curation=curation,
        stats=VersionStats(batch_size=0, k=0, p=0, levels=0, playbook_tokens=playbook_tokens(playbook)),
        content_hash=PlaybookVersion.compute_hash(playbook_id, new_version, parent_version, parent_version, ordered,
                                                  operations, lineage, baseline=baseline, challenges=challenges),
        published_at=now,
    )
    return SeededVersion(manifest, version)
