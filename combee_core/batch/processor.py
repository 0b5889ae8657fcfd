"""The batcher's decisions: which reflections are dead letters (a conflicting resend, too stale, not in the batch
plan), which are duplicates, which wait for their batch, when a batch closes and what is published for it.

Pure: the stage gives it each reflection with a token (its record), the monotonic time and the wall time, and
performs the effects it answers. A closed batch is ``[Publish(batches, manifest, number=(playbook, batch_id)),
Publish(shuffle, copy)..., Count..., Acknowledge(its reflections)]``: the copies go out, and the reflections are
committed, only if the manifest is the first of its batch id (``combee_core.processors.effects``). The state
it keeps besides the batch state machines (``combee_core.batch.batching``) is which tokens wait for what: the open
batch, a batch being re-sent after a restart, a planned batch.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from combee_core.batch.batch_plan import PlannedBatches
from combee_core.batch.batching import BatchAccumulator, ClosedBatch, ShuffleConfig, UnconfirmedBatches
from combee_core.batch.chain_pacing import ChainPacing
from combee_core.log_order import valid_manifests
from combee_core.models import BatchManifest, ControlDecision, Reflection
from combee_core.processors.effects import Count, Effect, Publish, Reject, acknowledge
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic

log = logging.getLogger(__name__)

UNCONFIRMED_KEEP = 8
"""Per playbook, the latest batches whose copies a new owner re-sends when all their reflections come back."""


@dataclass(frozen=True)
class BatcherConfig:
    shuffle: ShuffleConfig
    batch_size: int
    dedupe_horizon: int
    max_staleness: int | None = None
    max_wait_s: float = 5.0
    idle_s: float | None = None
    """Close a non-empty batch after this long without a new reflection (None: only by size or max_wait_s)."""
    plan_name: str | None = None
    """The topic the batch plan was read from (replay), named in the dead letter of a trace it does not list."""
    pacing: ChainPacing | None = None
    """Close batches when the version chain can take them (async fleets, ``combee_core.batch.chain_pacing``)."""

    @classmethod
    def from_settings(cls, settings: CombeeSettings) -> BatcherConfig:
        """The batcher stage's configuration."""
        return cls(
            shuffle=ShuffleConfig(run_seed=settings.run_seed, p=settings.p, max_fan_in=settings.max_fan_in,
                                  subgroups=settings.subgroups, context_lag=settings.context_lag),
            batch_size=settings.batch_size, dedupe_horizon=settings.dedupe_horizon,
            max_staleness=settings.max_staleness, max_wait_s=settings.max_wait_s, idle_s=settings.batch_idle_s,
            plan_name=settings.batch_plan_topic, pacing=pacing_of(settings),
        )


def pacing_of(settings: CombeeSettings) -> ChainPacing | None:
    """The chain pacing of an async fleet with ``batch_close = "chain"``: batches capped at the quality bound
    (``settings.batch_size_bound``: ``controller_bs_max``, else 160 in async fleets) with the controller, else at the
    fixed ``batch_size``. None otherwise (a sync fleet's rounds wait for each version already)."""
    if settings.fleet_mode != "async" or settings.batch_close != "chain":
        return None
    streams = settings.auto_batch_size and settings.controller_objective == "stream"
    return ChainPacing(cap=settings.batch_size_bound if settings.auto_batch_size else settings.batch_size,
                       close_held=streams, lag=settings.context_lag)


class Batcher:
    """Reflections in, batches out: one per playbook at a time, closed by size, by ``max_wait_s`` or by a plan."""

    def __init__(self, config: BatcherConfig, plan: list[BatchManifest] | None = None) -> None:
        self.config = config
        self.accumulator = BatchAccumulator(config.shuffle, default_batch_size=config.batch_size,
                                            dedupe_horizon=config.dedupe_horizon, pacing=config.pacing)
        self.unconfirmed = UnconfirmedBatches(config.shuffle, keep_per_playbook=UNCONFIRMED_KEEP)
        self.plan = PlannedBatches(config.shuffle, plan) if plan is not None else None
        self._recent: dict[str, deque[BatchManifest]] = {}
        self._last_decision: dict[str, int] = {}
        self._horizon_reported: set[str] = set()
        self._open: dict[str, list[object]] = {}
        self._resend: dict[tuple[str, int], list[object]] = {}
        self._planned: dict[str, list[object]] = {}
        self._planned_ready: deque[ClosedBatch] = deque()
        """Planned batches complete but not closed yet: one reflection can complete several (:meth:`_follow_plan`)."""
        self.stale: set[str] = set()
        """Playbooks whose batch state must be rebuilt from the ``batches`` log at the next assignment."""

    # ------------------------------------------------------------------------------------------ inputs

    def take(self, reflection: Reflection, token: object, now: float, wall: datetime) -> list[Effect]:
        """One reflection of a playbook this stage owns."""
        if self.accumulator.is_duplicate(reflection):
            return self._duplicate(reflection, token)
        staleness = self.accumulator.next_base_version(reflection.playbook_id) - reflection.seen_version
        limit = self.config.max_staleness
        if limit is not None and staleness > limit:
            return [Reject(token, f"stale: trace ran with version {reflection.seen_version}, {staleness} versions "
                           f"behind (max_staleness={limit})", "StaleTrace", trace_id=reflection.trace_id,
                           playbook_id=reflection.playbook_id)]
        if self.plan is not None:
            return self._follow_plan(reflection, token, wall)
        self._open.setdefault(reflection.playbook_id, []).append(token)
        closed = self.accumulator.add(reflection, now, wall)
        return self._close(closed) if closed is not None else []

    def close_due(self, now: float, wall: datetime, drained: Collection[str] = ()) -> list[list[Effect]]:
        """Batches open longer than ``max_wait_s`` (with at least one reflection), or idle (``idle_s``; sooner for the
        ``drained`` playbooks, whose reflector had no trace waiting), close: one effect list per batch, which the
        stage performs on its own. A manifest that does not count (lost, or its partition revoked during the write)
        then stops only its own batch's copies and acknowledgements, never the next batch's manifest, whose batch id
        and trace ids this state has already taken (skipped, they would be a batch in no log, and its redelivered
        reflections duplicates of nothing). Planned batches that a reflection completed after its first close here,
        each on its own as well."""
        planned = [self._close_planned() for _ in range(len(self._planned_ready))]
        return planned + [self._close(closed) for closed in self.accumulator.close_expired(
            now, self.config.max_wait_s, wall, self.config.idle_s, drained)]

    def tick(self, now: float, wall: datetime, drained: Collection[str] = ()) -> list[Effect]:
        """:meth:`close_due` as one list, for a driver that performs every effect (a test); a stage must not."""
        return [effect for effects in self.close_due(now, wall, drained) for effect in effects]

    def _follow_plan(self, reflection: Reflection, token: object, wall: datetime) -> list[Effect]:
        assert self.plan is not None
        if self.plan.batch_of(reflection) is None:
            return [Reject(token, f"trace {reflection.trace_id} is not in the batch plan ({self.config.plan_name})",
                           "UnplannedTrace", trace_id=reflection.trace_id, playbook_id=reflection.playbook_id)]
        self._planned.setdefault(reflection.trace_id, []).append(token)
        self._planned_ready.extend(self.plan.add(reflection, wall))
        return self._close_planned() if self._planned_ready else []

    def _close_planned(self) -> list[Effect]:
        """The next complete planned batch. One per effect list, as in :meth:`close_due`: a reflection that completes
        several batches closes the first now and the rest at the next tick, so that a manifest that does not count
        skips no other batch's manifest."""
        batch = self._planned_ready.popleft()
        self.accumulator.restore(batch.manifest)  # dedupe and base versions, as if it had been formed here
        return self._close(batch)

    def _duplicate(self, reflection: Reflection, token: object) -> list[Effect]:
        """A trace already batched: a client's resend, or a redelivery after a crash (see UnconfirmedBatches); or
        another trace under a taken trace_id (a dead letter: the first one is the one learned)."""
        learned = self.accumulator.conflicting_digest(reflection)
        if learned is not None:
            return [Reject(token, f"trace_id {reflection.trace_id} was sent again with different content (digest "
                           f"{reflection.trace_digest}); the trace batched first under this id (digest {learned}) "
                           "is the one learned, this one is not", "ConflictingTrace", trace_id=reflection.trace_id,
                           playbook_id=reflection.playbook_id)]
        batch_id = self.unconfirmed.batch_of(reflection)
        if batch_id is None:
            return [Count("duplicate_traces"), *acknowledge([token])]
        key = (reflection.playbook_id, batch_id)
        self._resend.setdefault(key, []).append(token)
        batch = self.unconfirmed.collect(reflection)
        if batch is None:
            return []
        log.info("re-sending the copies of batch %s/%d after a restart", *key)
        return [*self._copies(batch), Count("batches_resent"), *acknowledge(self._resend.pop(key, []))]

    def _close(self, batch: ClosedBatch) -> list[Effect]:
        """Manifest first (it fixes the batch's membership for good, if it is the first of its id), then the
        copies, then acknowledge its reflections."""
        manifest = batch.manifest
        playbook_id = manifest.playbook_id
        held = self._open.pop(playbook_id, [])  # the open batch's tokens, oldest first: a close takes the oldest
        tokens = held[:manifest.n]
        if held[manifest.n:]:
            self._open[playbook_id] = held[manifest.n:]
        for trace_id in manifest.trace_ids if self.plan is not None else ():
            tokens += self._planned.pop(trace_id, [])
        return [
            Publish(Topic.BATCHES, playbook_id, manifest, number=(playbook_id, manifest.batch_id)),
            *self._copies(batch),
            Count("batches"),
            Count("shuffled_copies", len(batch.copies)),
            *self._horizon(playbook_id),
            *acknowledge(tokens),
        ]

    @staticmethod
    def _copies(batch: ClosedBatch) -> list[Effect]:
        return [Publish(Topic.SHUFFLE, f"{copy.playbook_id}/{copy.batch_id}/{copy.subgroup}", copy)
                for copy in batch.copies]

    def _horizon(self, playbook_id: str) -> list[Effect]:
        """Say once per playbook when batched trace ids start leaving the dedupe horizon (no silent cap)."""
        if not self.accumulator.forgotten(playbook_id) or playbook_id in self._horizon_reported:
            return []
        self._horizon_reported.add(playbook_id)
        horizon = self.config.dedupe_horizon
        log.warning("%s: more than %d traces batched; the oldest trace ids are forgotten from now on, so a trace "
                    "resent after %d newer ones would be batched again (dedupe_horizon)", playbook_id, horizon, horizon)
        return [Count("playbooks_past_dedupe_horizon")]

    # ------------------------------------------------------------------------------------------ state

    def restore(self, manifest: BatchManifest) -> None:
        """A manifest that counts, read from the ``batches`` log in order."""
        self.accumulator.restore(manifest)
        if self.plan is not None:
            self.plan.restore(manifest)
        self._recent.setdefault(manifest.playbook_id, deque(maxlen=UNCONFIRMED_KEEP)).append(manifest)

    def take_version(self, playbook_id: str, batch_id: int) -> None:
        """A version of the playbook was published from batch ``batch_id``: the chain has taken it (a batch held for
        the chain closes at the next :meth:`close_due`)."""
        self.accumulator.chain_advanced(playbook_id, batch_id)

    def take_decision(self, decision: ControlDecision) -> bool:
        """A controller decision (each id once, in order): the playbook's batch size from now on."""
        if decision.decision_id <= self._last_decision.get(decision.playbook_id, -1):
            return False
        self._last_decision[decision.playbook_id] = decision.decision_id
        self.accumulator.set_target(decision.playbook_id, decision.batch_size)
        return True

    def drop_open(self, playbook_id: str) -> None:
        """Forget the playbook's open batch and its reflections (they come back, redelivered, after a reset)."""
        self.accumulator.drop_open(playbook_id)
        self._open.pop(playbook_id, None)

    def release(self, playbook_id: str) -> None:
        """The playbook's partition was revoked: drop its open batch and the re-sends it was collecting."""
        self.drop_open(playbook_id)
        self.unconfirmed.forget_playbook(playbook_id)
        for key in [key for key in self._resend if key[0] == playbook_id]:
            del self._resend[key]

    def rebuild(self, playbook_id: str, manifests: list[BatchManifest]) -> None:
        """After losing a batch id to another writer: the playbook's batch state again, from the ``batches`` log
        (every readable manifest, in order; the first of each batch id counts), then the latest manifests the live
        view applied (it may have applied some after ``manifests`` was read). Its open batch and the reflections held
        for a re-send go with the old state: only rebuild a playbook whose partition was just released, so that they
        come back (:meth:`rebuild_stale`)."""
        self.release(playbook_id)
        self.accumulator.forget_playbook(playbook_id)
        for manifest in valid_manifests(m for m in manifests if m.playbook_id == playbook_id):
            self.accumulator.restore(manifest)
        for manifest in self._recent.get(playbook_id, ()):
            self.accumulator.restore(manifest)

    def foreign_write(self, playbook_id: str) -> None:
        """Another writer's manifest counts for an owned playbook: its traces may be in the open batch, dropped now
        (its records come back after the reset) so that no later close re-batches them; rebuilt at assignment."""
        self.drop_open(playbook_id)
        self.stale.add(playbook_id)

    def lost_write(self, playbook_id: str) -> None:
        """A manifest of this stage's lost its batch id: the playbook is rebuilt at assignment (its open batch is
        dropped by the reset's release, as before the numbered log)."""
        self.stale.add(playbook_id)

    def rebuild_stale(self, manifests: list[BatchManifest], assigned: Collection[str]) -> None:
        """The stale playbooks among ``assigned`` (those of the partitions being assigned now, released and read again
        from their committed offsets), rebuilt from the ``batches`` log (:meth:`rebuild`). A stale playbook whose
        partition this stage keeps owning meanwhile is rebuilt when that partition's reset assigns it again: rebuilt
        now, its open batch's reflections would be forgotten while their records stay read, never to come back."""
        for playbook_id in sorted(self.stale.intersection(assigned)):
            self.rebuild(playbook_id, manifests)
            self.stale.discard(playbook_id)

    def rearm(self, playbook_id: str) -> None:
        """Newly owned: the playbook's latest batches may have lost copies; re-send them when they come back."""
        self.unconfirmed.forget_playbook(playbook_id)
        for manifest in self._recent.get(playbook_id, ()):
            self.unconfirmed.restore(manifest)

    def confirm(self, playbook_id: str) -> list[Effect]:
        """The playbook's partition was read past its end at assignment: every batch not fully redelivered was
        confirmed before, so the reflections held for re-sending it are duplicates (a client's partial resend must
        not pin the committed offset)."""
        self.unconfirmed.forget_playbook(playbook_id)
        effects: list[Effect] = []
        for key in [key for key in self._resend if key[0] == playbook_id]:
            tokens = self._resend.pop(key)
            effects += [Count("duplicate_traces", len(tokens)), *acknowledge(tokens)]
        return effects

    def playbook_ids(self) -> list[str]:
        return self.accumulator.playbook_ids()
