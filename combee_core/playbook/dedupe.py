"""Deduplication: near-identical entries of a section folded together, as MERGE operations applied through the
operation algebra (:func:`~combee_core.playbook.operations.apply_operations`)."""

from __future__ import annotations

from combee_core.models import MergeOp, PlaybookEntry
from combee_core.playbook.operations import MAX_MERGE_IDS, apply_operations
from combee_core.playbook.similarity import NEAR_DUPLICATE_THRESHOLD, ComparableText, near_duplicate_score
from combee_core.playbook.value import ApplyResult, Playbook, entry_value


def deduplication_operations(
    playbook: Playbook, threshold: float = NEAR_DUPLICATE_THRESHOLD
) -> list[MergeOp]:
    """MERGE operations that fold near-identical entries of each section together.

    Entries are visited in playbook order; each joins the first earlier cluster whose *first* entry it
    near-duplicates (no chaining, so clusters cannot drift). A cluster keeps its first (oldest) id and takes the
    content of its best entry (``helpful - harmful`` desc, then id). Clusters larger than the 32 ids a MERGE may
    list become several MERGEs into the same first id.
    """
    clusters: list[list[PlaybookEntry]] = []
    texts = {e.entry_id: ComparableText.of(e.content) for e in playbook.entries}
    for entry in playbook.entries:
        for cluster in clusters:
            head = cluster[0]
            if head.section == entry.section and near_duplicate_score(
                texts[entry.entry_id], texts[head.entry_id], threshold
            ) is not None:
                cluster.append(entry)
                break
        else:
            clusters.append([entry])
    operations: list[MergeOp] = []
    for cluster in clusters:
        if len(cluster) < 2:
            continue
        head, rest = cluster[0], cluster[1:]
        content = min(cluster, key=entry_value).content
        step = MAX_MERGE_IDS - 1
        for start in range(0, len(rest), step):
            ids = [head.entry_id, *(e.entry_id for e in rest[start : start + step])]
            operations.append(MergeOp(entry_ids=ids, content=content))
    return operations


def deduplicate(
    playbook: Playbook, new_version: int, threshold: float = NEAR_DUPLICATE_THRESHOLD
) -> ApplyResult:
    """Merge near-identical entries within each section, recorded as MERGE operations in the result."""
    return apply_operations(
        playbook,
        deduplication_operations(playbook, threshold),
        new_version,
        near_duplicate_threshold=threshold,
    )
