"""Replay's batching: follow recorded batch manifests instead of closing batches by size and time."""

from __future__ import annotations

from datetime import datetime

from combee_core.batch.batching import ClosedBatch, ShuffleConfig, deal_as_manifest
from combee_core.errors import CombeeError
from combee_core.models import BatchManifest, Reflection


class BatchPlanError(CombeeError, ValueError):
    """A batch plan that cannot be followed (gaps in batch ids, a trace in two batches)."""


class PlannedBatches:
    """Follow recorded batch manifests instead of closing batches by size and time (replay).

    Batch b of a playbook is formed from exactly the trace ids its manifest lists, in that order, with its recorded
    target size and closing reason, once all their reflections have arrived; batches are released in id order, so
    reflections may arrive in any order. Plan batch ids must run 0, 1, 2, ... per playbook. Batches already published
    (the ``batches`` topic, at a restart) are skipped via :meth:`restore`.
    """

    def __init__(self, config: ShuffleConfig, manifests: list[BatchManifest]) -> None:
        self._config = config
        self._plans: dict[str, list[BatchManifest]] = {}
        self._batch_of: dict[tuple[str, str], int] = {}
        for manifest in sorted(manifests, key=lambda m: (m.playbook_id, m.batch_id)):
            plan = self._plans.setdefault(manifest.playbook_id, [])
            if manifest.batch_id != len(plan):
                raise BatchPlanError(
                    f"plan for {manifest.playbook_id} has batch {manifest.batch_id} where batch {len(plan)} was "
                    "expected (batch ids must run 0, 1, 2, ...)"
                )
            if len(set(manifest.trace_ids)) != len(manifest.trace_ids):
                raise BatchPlanError(f"batch {manifest.batch_id} of {manifest.playbook_id} lists a trace twice")
            plan.append(manifest)
            for trace_id in manifest.trace_ids:
                previous = self._batch_of.setdefault((manifest.playbook_id, trace_id), manifest.batch_id)
                if previous != manifest.batch_id:
                    raise BatchPlanError(f"trace {trace_id} is in batches {previous} and {manifest.batch_id} "
                                         f"of {manifest.playbook_id}")
        self._next: dict[str, int] = dict.fromkeys(self._plans, 0)
        self._arrived: dict[tuple[str, int], dict[str, Reflection]] = {}

    def restore(self, manifest: BatchManifest) -> None:
        """A batch already published: the plan resumes after it."""
        if manifest.playbook_id in self._next:
            self._next[manifest.playbook_id] = max(self._next[manifest.playbook_id], manifest.batch_id + 1)

    def batch_of(self, reflection: Reflection) -> int | None:
        """Planned batch id of this reflection's trace, or None when the plan does not list it."""
        return self._batch_of.get((reflection.playbook_id, reflection.trace_id))

    def remaining(self, playbook_id: str) -> int:
        """Planned batches of the playbook not released yet."""
        return len(self._plans.get(playbook_id, ())) - self._next.get(playbook_id, 0)

    def add(self, reflection: Reflection, wall_time: datetime) -> list[ClosedBatch]:
        """Take a reflection of the plan; returns the batches that became complete, in id order."""
        batch_id = self.batch_of(reflection)
        if batch_id is None:
            raise BatchPlanError(f"trace {reflection.trace_id} is not in the batch plan of {reflection.playbook_id}")
        playbook_id = reflection.playbook_id
        if batch_id >= self._next[playbook_id]:
            self._arrived.setdefault((playbook_id, batch_id), {})[reflection.trace_id] = reflection
        released: list[ClosedBatch] = []
        plan = self._plans[playbook_id]
        while self._next[playbook_id] < len(plan):
            manifest = plan[self._next[playbook_id]]
            arrived = self._arrived.get((playbook_id, manifest.batch_id), {})
            if len(arrived) < len(manifest.trace_ids):
                break
            released.append(deal_as_manifest(manifest, arrived, self._config, wall_time))
            self._arrived.pop((playbook_id, manifest.batch_id), None)
            self._next[playbook_id] += 1
        return released
