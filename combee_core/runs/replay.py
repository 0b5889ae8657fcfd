"""Planning a replay: which recorded traces to send again, and the batches they must form.

A replay sends the selected traces of a recorded run into a fresh run namespace whose batcher follows the recorded
batch manifests (``PlannedBatches``). :func:`plan_replay` restricts the manifests to the selected traces and
renumbers them 0, 1, 2, ... per playbook (a full replay keeps the recorded ids, so its versions are byte-identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from combee_core.batch.shuffle import derive_seed
from combee_core.errors import CombeeError
from combee_core.models import BatchManifest
from combee_core.runs.archive import ArchiveRecord


class ReplayError(CombeeError, ValueError):
    """A replay that cannot be done as asked; the message says why and what to change."""


@dataclass(frozen=True)
class TraceSelection:
    """Which records of the traces topic to replay: offsets (per partition, from inclusive, to exclusive) and record
    times (since inclusive, until exclusive). Unset bounds select everything."""

    from_offset: int | None = None
    to_offset: int | None = None
    since: datetime | None = None
    until: datetime | None = None

    def includes(self, record: ArchiveRecord) -> bool:
        if self.from_offset is not None and record.offset < self.from_offset:
            return False
        if self.to_offset is not None and record.offset >= self.to_offset:
            return False
        if self.since is not None and record.timestamp < _millis(self.since):
            return False
        if self.until is not None and record.timestamp >= _millis(self.until):
            return False
        return True


def _millis(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ReplayError(f"time {moment.isoformat()} has no timezone (write it with Z or +00:00)")
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay sends and the batches it must form."""

    traces: tuple[ArchiveRecord, ...]
    """Trace records to send, in recorded order (by timestamp, partition, offset)."""
    manifests: tuple[BatchManifest, ...]
    """The batches to form, per playbook numbered 0, 1, 2, ..."""
    selected: int
    """Trace records the selection matched."""
    unbatched: tuple[str, ...]
    """Selected valid traces that no recorded batch holds (not replayed: their batch never closed in the run)."""
    cut_batches: int
    """Recorded batches only partly selected (replayed with the selected part)."""
    renumbered: bool
    """Some planned batch has another id than its recorded batch (batches before it were left out)."""
    mismatch: str | None = None
    """Why the planned batches are not a leading run of whole recorded batches (None when they are)."""

    @property
    def matches_recording(self) -> bool:
        """Whole recorded batches from each playbook's first: the recording's first versions and LLM calls again."""
        return self.mismatch is None

    def expected_versions(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for manifest in self.manifests:
            counts[manifest.playbook_id] = counts.get(manifest.playbook_id, 0) + 1
        return counts


def trace_identity(record: ArchiveRecord) -> tuple[str, str] | None:
    """(playbook_id, trace_id) of a trace record, or None when it is not a trace object (a dead letter in the run)."""
    value = record.json_value()
    if isinstance(value, dict) and isinstance(value.get("trace_id"), str) and isinstance(value.get("playbook_id"), str):
        return value["playbook_id"], value["trace_id"]
    return None


def select_traces(traces: Sequence[ArchiveRecord], selection: TraceSelection = TraceSelection()) -> list[ArchiveRecord]:
    """The selected trace records in recorded order (timestamp, partition, offset)."""
    return [r for r in sorted(traces, key=lambda r: (r.timestamp, r.partition, r.offset)) if selection.includes(r)]


def plan_replay(
    traces: Sequence[ArchiveRecord], manifests: Sequence[BatchManifest], selection: TraceSelection = TraceSelection()
) -> ReplayPlan:
    """The traces to send and the batches to form for a replay of ``selection``.

    Traces that are not trace objects are sent too (the run dead-lettered them; so will the replay). Valid traces
    no recorded batch holds are left out and listed in ``unbatched``.
    """
    chosen = select_traces(traces, selection)
    chosen_ids = {identity for r in chosen if (identity := trace_identity(r)) is not None}
    ordered = sorted(manifests, key=lambda m: (m.playbook_id, m.batch_id))
    planned: list[BatchManifest] = []
    next_id: dict[str, int] = {}
    cut = 0
    renumbered = False
    mismatch: str | None = None
    for manifest in ordered:
        keep = [i for i, t in enumerate(manifest.trace_ids) if (manifest.playbook_id, t) in chosen_ids]
        if not keep:
            continue
        where = f"recorded batch {manifest.batch_id} of {manifest.playbook_id}"
        if len(keep) < len(manifest.trace_ids):
            cut += 1
            mismatch = mismatch or f"{where} is cut: {len(keep)} of its {len(manifest.trace_ids)} traces are selected"
        batch_id = next_id.get(manifest.playbook_id, 0)
        next_id[manifest.playbook_id] = batch_id + 1
        if batch_id != manifest.batch_id:
            renumbered = True
            mismatch = mismatch or f"{where} becomes batch {batch_id}: the batches before it are not selected"
        planned.append(manifest.model_copy(update={
            "batch_id": batch_id,
            "base_version": batch_id,
            "trace_ids": [manifest.trace_ids[i] for i in keep],
            "reflection_ids": [manifest.reflection_ids[i] for i in keep],
            "n": len(keep),
        }))
    in_plan = {(m.playbook_id, t) for m in planned for t in m.trace_ids}
    sent = tuple(r for r in chosen if (identity := trace_identity(r)) is None or identity in in_plan)
    unbatched = tuple(sorted({t for (_, t) in chosen_ids - in_plan}))
    return ReplayPlan(traces=sent, manifests=tuple(planned), selected=len(chosen), unbatched=unbatched,
                      cut_batches=cut, renumbered=renumbered, mismatch=mismatch)


def settings_mismatch(manifests: Sequence[BatchManifest], run_seed: int, p: int) -> str | None:
    """Why ``run_seed`` / ``p`` cannot be the settings that made the recorded batches, or None when they can be."""
    for manifest in manifests:
        if manifest.p != p:
            return f"batch {manifest.batch_id} of {manifest.playbook_id} was dealt with p={manifest.p}, not p={p}"
        if manifest.seed != derive_seed(run_seed, manifest.playbook_id, manifest.batch_id):
            return (f"batch {manifest.batch_id} of {manifest.playbook_id} was shuffled with a seed that run seed "
                    f"{run_seed} does not give")
    return None
