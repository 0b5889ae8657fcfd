"""UPDATE, MERGE, DELETE and TAG applied: each checked against the entries it names and the change cap, the count
bound on TAG counts."""

from __future__ import annotations

import combee_core.playbook.aliases as alias_rules
from combee_core.models import AppliedOperation, DeleteOp, MergeOp, TagOp, UpdateOp
from combee_core.playbook.value import merged_entry
from combee_core.playbook.working_playbook import WorkingPlaybook


def apply_update(work: WorkingPlaybook, op: UpdateOp) -> AppliedOperation:
    """UPDATE: the entry's text replaced (an identical text changes nothing), within the caps."""
    if (why := work.missing(op.entry_id)) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    entry = work.entries[op.entry_id]
    if entry.content == op.content:
        return AppliedOperation(
            operation=op, outcome="applied", reason="content unchanged", entry_id=op.entry_id
        )
    if (why := work.over_cap([op.entry_id])) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    work.mark_changed([op.entry_id])
    work.entries[op.entry_id] = entry.model_copy(
        update={"content": op.content, "updated_version": work.new_version}
    )
    return AppliedOperation(operation=op, outcome="applied", reason="updated", entry_id=op.entry_id)


def apply_merge(work: WorkingPlaybook, op: MergeOp) -> AppliedOperation:
    """MERGE: the first listed entry kept with the new text, every listed entry's counters and aliases;
    the others removed, within the caps."""
    listed: dict[str, None] = {}
    for entry_id in op.entry_ids:
        if entry_id in listed:
            return AppliedOperation(operation=op, outcome="rejected",
                                    reason=f"entry {entry_id} is listed more than once")
        listed[entry_id] = None
        if (why := work.missing(entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
    merged = [work.entries[entry_id] for entry_id in op.entry_ids]
    keep, others = merged[0], merged[1:]
    aliases, alias_note = alias_rules.merged_aliases(op.content, merged)
    changing = [e.entry_id for e in others] + ([keep.entry_id] if keep.content != op.content else [])
    if (why := work.over_cap(changing)) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    work.mark_changed(changing)
    work.entries[keep.entry_id] = merged_entry(keep, merged, op.content, work.new_version, aliases)
    for other in others:
        del work.entries[other.entry_id]
        work.removed[other.entry_id] = f"merged into {keep.entry_id}"
    return AppliedOperation(operation=op, outcome="applied", entry_id=keep.entry_id, reason=(
        f"merged {', '.join(e.entry_id for e in others)} into {keep.entry_id}{alias_note}"))


def apply_delete(work: WorkingPlaybook, op: DeleteOp) -> AppliedOperation:
    """DELETE: the entry removed, within the caps; its strongest pending correction enters in its place
    (``combee_core.playbook.succession``)."""
    if (why := work.missing(op.entry_id)) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    if (why := work.over_cap([op.entry_id])) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    work.mark_changed([op.entry_id])
    removed = work.entries.pop(op.entry_id)
    work.removed[op.entry_id] = "deleted"
    heir = work.succeed(removed, "deleted by the reducer's DELETE")
    return AppliedOperation(operation=op, outcome="applied", reason=f"deleted{heir}", entry_id=op.entry_id)


def apply_tag(work: WorkingPlaybook, op: TagOp) -> AppliedOperation:
    """TAG: ``helpful`` or ``harmful`` raised by the count, within the count bound; ``neutral`` changes
    nothing."""
    if (why := work.missing(op.entry_id)) is not None:
        return AppliedOperation(operation=op, outcome="rejected", reason=why)
    if op.tag == "neutral":
        return AppliedOperation(operation=op, outcome="applied", reason="neutral tag: no change",
                                entry_id=op.entry_id)
    entry = work.entries[op.entry_id]
    granted, bound = work.gain(op.entry_id, op.tag, op.count)
    work.entries[op.entry_id] = entry.model_copy(update={op.tag: getattr(entry, op.tag) + granted,
                                                         "updated_version": work.new_version})
    return AppliedOperation(
        operation=op, outcome="applied", reason=f"{op.tag} +{granted}{bound}", entry_id=op.entry_id
    )
