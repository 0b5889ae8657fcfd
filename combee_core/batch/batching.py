"""The batcher's state machine: assign reflections to batches (windows), close them, deal the augmented shuffle.

Pure and clock-injected: the stream stage passes ``now`` (monotonic seconds) and the wall time to stamp.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from combee_core.batch.chain_pacing import ChainPacing
from combee_core.batch.shuffle import DEFAULT_CALL_CAPACITY, derive_seed, plan_augmented_shuffle
from combee_core.batch.trace_dedupe import DEFAULT_DEDUPE_HORIZON, RecentTraceIds
from combee_core.models import BatchManifest, Reflection, ShuffledReflection, Usage

SubgroupRule = Literal["sqrt", "single"]

UPSTREAM_DRAINED = "combee-upstream-drained"
"""Header the reflector puts on the last reflection it publishes for a partition with no trace left to reflect."""

IDLE_GAPS = 10
"""An open batch closes after this many mean gaps between its playbook's reflections without one (the stream's own
pace says it paused or stopped), within [IDLE_FLOOR_S, ``batch_idle_s``]."""
IDLE_FLOOR_S = 0.5
"""The shortest idle wait (the reflector's word that nothing is waiting is needed for any wait under ``batch_idle_s``:
a loaded worker's reflections can come out seconds apart in mid-stream)."""
GAP_SMOOTHING = 0.1
"""Weight of the newest gap in the mean gap between reflections (about the last 10-20 count)."""


def idle_after(mean_gap_s: float | None, idle_s: float) -> float:
    """Seconds without a new reflection after which an open batch closes: :data:`IDLE_GAPS` mean gaps between the
    playbook's reflections, at least :data:`IDLE_FLOOR_S`, at most ``idle_s`` (``idle_s`` before two reflections
    have given a gap). At 20 traces/s (a gap of 0.05 s) that is the floor, 0.5 s; at 2 traces/s, ``idle_s``."""
    if mean_gap_s is None:
        return idle_s
    return min(idle_s, max(IDLE_FLOOR_S, IDLE_GAPS * mean_gap_s))


@dataclass(frozen=True)
class ShuffleConfig:
    """How batches are dealt: copies per reflection, subgroup rule and fan-in bound."""

    run_seed: int = 0
    p: int = 2
    max_fan_in: int = DEFAULT_CALL_CAPACITY
    subgroups: SubgroupRule = "sqrt"
    context_lag: int = 0
    """Batch b's aggregators read version max(0, b - context_lag) (``combee_core.batch.chain_pacing``, "Context
    lag"); recorded in its manifest and copies, so a replay or a re-send reads the same version."""


@dataclass(frozen=True)
class ClosedBatch:
    """A closed batch: its manifest and the shuffled copies to publish."""

    manifest: BatchManifest
    copies: tuple[ShuffledReflection, ...]


def deal_batch(
    playbook_id: str,
    batch_id: int,
    reflections: list[Reflection],
    config: ShuffleConfig,
    *,
    target_batch_size: int,
    closed_by: Literal["size", "max_wait", "idle"],
    closed_at: datetime,
    k: int | None = None,
) -> ClosedBatch:
    """Augmented shuffle of one batch: p copies of each reflection dealt to k subgroups (``k``: as given, else by the
    config's rule), seeded by the batch; its aggregators read version ``batch_id - config.context_lag`` (at least 0)."""
    n = len(reflections)
    if n == 0:
        raise ValueError("cannot deal an empty batch")
    seed = derive_seed(config.run_seed, playbook_id, batch_id)
    if config.subgroups == "single":
        subgroups = [[(item, replica) for replica in range(config.p) for item in range(n)]]
    else:
        plan = plan_augmented_shuffle(n, config.p, seed, max_fan_in=config.max_fan_in, k=k)
        subgroups = [[(copy.item, copy.replica) for copy in group] for group in plan.subgroups]
    k = len(subgroups)
    base_version = batch_id
    copies = []
    for subgroup, members in enumerate(subgroups):
        for position, (item, replica) in enumerate(members):
            copies.append(
                ShuffledReflection(
                    playbook_id=playbook_id,
                    batch_id=batch_id,
                    subgroup=subgroup,
                    replica=replica,
                    expected_count=len(members),
                    k=k,
                    p=config.p,
                    batch_size=n,
                    base_version=base_version,
                    context_lag=config.context_lag,
                    position=position,
                    batch_closed_at=closed_at,
                    reflection=reflections[item],
                )
            )
    manifest = BatchManifest(
        playbook_id=playbook_id,
        batch_id=batch_id,
        base_version=base_version,
        context_lag=config.context_lag,
        trace_ids=[r.trace_id for r in reflections],
        reflection_ids=[r.reflection_id for r in reflections],
        n=n,
        k=k,
        p=config.p,
        seed=seed,
        subgroup_sizes=[len(members) for members in subgroups],
        target_batch_size=target_batch_size,
        closed_by=closed_by,
        closed_at=closed_at,
        trace_digests=[r.trace_digest for r in reflections] if any(r.trace_digest for r in reflections) else None,
        reflection_usage=sum((r.usage for r in reflections), Usage()),
    )
    return ClosedBatch(manifest=manifest, copies=tuple(copies))


@dataclass
class _PlaybookBatches:
    seen_trace_ids: RecentTraceIds
    next_batch_id: int = 0
    target_batch_size: int = 40
    open_reflections: list[Reflection] = field(default_factory=list)
    opened_at: float | None = None
    last_added_at: float | None = None
    mean_gap_s: float | None = None
    """Smoothed gap between the playbook's reflections (across batches)."""
    applied: int = 0
    """Batches that are versions (the newest version's batch id + 1): what the chain has built."""
    held: int = 0
    """The most batches in flight when the open batch took a reflection (chain pacing closes it once fewer are)."""


class BatchAccumulator:
    """Per-playbook open batches with dedupe by trace_id; batch ids are 0, 1, 2, ... per playbook.

    Dedupe covers the open batch and the last ``dedupe_horizon`` batched traces of each playbook (RecentTraceIds).
    With ``pacing`` a batch closes when the version chain can take it (``combee_core.batch.chain_pacing``): the open
    batch may then hold more than one batch's worth, and a close takes its oldest reflections up to the cap.
    """

    def __init__(
        self, config: ShuffleConfig, default_batch_size: int, dedupe_horizon: int = DEFAULT_DEDUPE_HORIZON,
        pacing: ChainPacing | None = None,
    ) -> None:
        if dedupe_horizon < 1:
            raise ValueError(f"dedupe horizon must be at least 1 trace, got {dedupe_horizon}")
        self._config = config
        self._default_batch_size = default_batch_size
        self._dedupe_horizon = dedupe_horizon
        self._pacing = pacing
        self._playbooks: dict[str, _PlaybookBatches] = {}

    def _state(self, playbook_id: str) -> _PlaybookBatches:
        state = self._playbooks.get(playbook_id)
        if state is None:
            state = _PlaybookBatches(
                seen_trace_ids=RecentTraceIds(self._dedupe_horizon), target_batch_size=self._default_batch_size
            )
            self._playbooks[playbook_id] = state
        return state

    def restore(self, manifest: BatchManifest) -> None:
        """Replay a published manifest (startup recovery): its traces are done and its id is taken."""
        state = self._state(manifest.playbook_id)
        state.seen_trace_ids.batched(manifest.trace_ids, manifest.trace_digests)
        state.next_batch_id = max(state.next_batch_id, manifest.batch_id + 1)

    def drop_open(self, playbook_id: str) -> None:
        """Forget the open batch of a playbook (its partition was revoked: its reflections come back elsewhere)."""
        state = self._playbooks.get(playbook_id)
        if state is not None:
            state.seen_trace_ids.release_open()
            state.open_reflections = []
            state.opened_at = None
            state.held = 0

    def forget_playbook(self, playbook_id: str) -> None:
        """Drop everything known of a playbook (before rebuilding it from the ``batches`` log); keeps its target."""
        state = self._playbooks.pop(playbook_id, None)
        if state is not None:
            self._state(playbook_id).target_batch_size = state.target_batch_size
            self._state(playbook_id).applied = state.applied

    def set_target(self, playbook_id: str, batch_size: int) -> None:
        """Batch size for batches opened from now on (the open one closes at the new size too)."""
        self._state(playbook_id).target_batch_size = max(1, batch_size)

    def target(self, playbook_id: str) -> int:
        return self._state(playbook_id).target_batch_size

    def is_duplicate(self, reflection: Reflection) -> bool:
        """Is this trace in the open batch or among the playbook's last ``dedupe_horizon`` batched traces?"""
        return reflection.trace_id in self._state(reflection.playbook_id).seen_trace_ids

    def conflicting_digest(self, reflection: Reflection) -> str | None:
        """For a duplicate trace_id: the digest of the trace batched first under it, when this one differs."""
        known = self._state(reflection.playbook_id).seen_trace_ids.digest_of(reflection.trace_id)
        if known is None or reflection.trace_digest is None or known == reflection.trace_digest:
            return None
        return known

    def forgotten(self, playbook_id: str) -> int:
        """How many batched trace ids of the playbook have left the dedupe horizon."""
        return self._state(playbook_id).seen_trace_ids.forgotten

    def chain_advanced(self, playbook_id: str, batch_id: int) -> None:
        """Batch ``batch_id`` of the playbook is a version now (read from the ``playbook`` log)."""
        state = self._state(playbook_id)
        state.applied = max(state.applied, batch_id + 1)

    def pending(self, playbook_id: str) -> int:
        """The playbook's batches closed and not yet a version (the one being built and those waiting)."""
        state = self._state(playbook_id)
        return max(0, state.next_batch_id - state.applied)

    def next_base_version(self, playbook_id: str) -> int:
        """Version the currently open batch will be applied to."""
        return self._state(playbook_id).next_batch_id

    def add(self, reflection: Reflection, now: float, wall_time: datetime) -> ClosedBatch | None:
        """Add a reflection; returns the closed batch when it filled one. Duplicates (same trace_id) are ignored."""
        state = self._state(reflection.playbook_id)
        if reflection.trace_id in state.seen_trace_ids:
            return None
        state.seen_trace_ids.hold(reflection.trace_id, reflection.trace_digest)
        if not state.open_reflections:
            state.opened_at = now
        state.open_reflections.append(reflection)
        if state.last_added_at is not None:
            gap = max(0.0, now - state.last_added_at)
            state.mean_gap_s = gap if state.mean_gap_s is None else \
                state.mean_gap_s + GAP_SMOOTHING * (gap - state.mean_gap_s)
        state.last_added_at = now
        due = len(state.open_reflections) >= state.target_batch_size
        if self._pacing is None:
            return self._close(reflection.playbook_id, "size", wall_time, now) if due else None
        pending = self.pending(reflection.playbook_id)
        state.held = max(state.held, pending)
        if self._pacing.may_close(len(state.open_reflections), due=due, pending=pending,
                                  target=state.target_batch_size, held=state.held):
            return self._close(reflection.playbook_id, "size", wall_time, now)
        return None

    def close_expired(self, now: float, max_wait_s: float, wall_time: datetime,
                      idle_s: float | None = None, drained: Collection[str] = ()) -> list[ClosedBatch]:
        """Close every non-empty batch that has waited at least ``max_wait_s``, or (with ``idle_s``) that has had no
        new reflection for ``idle_s`` (the stream paused or stopped: its last traces need not wait ``max_wait_s``);
        for the ``drained`` playbooks (the reflector said no trace of theirs was waiting), already after
        :func:`idle_after` their stream's mean gap. With pacing, a batch due (by these or by its size) closes only
        when the chain can take it, and a playbook may close two (the one the chain takes, and one at the cap)."""
        closed = []
        for playbook_id, state in sorted(self._playbooks.items()):
            while state.open_reflections and state.opened_at is not None:
                reason = self._due(playbook_id, state, now, max_wait_s, idle_s, drained,
                                   by_size=self._pacing is not None)
                if self._pacing is None:
                    if reason is None:
                        break
                elif not self._pacing.may_close(len(state.open_reflections), due=reason is not None,
                                                pending=self.pending(playbook_id), target=state.target_batch_size,
                                                held=state.held):
                    break
                closed.append(self._close(playbook_id, reason or "size", wall_time, now))
        return closed

    @staticmethod
    def _due(playbook_id: str, state: _PlaybookBatches, now: float, max_wait_s: float, idle_s: float | None,
             drained: Collection[str], *, by_size: bool) -> Literal["size", "max_wait", "idle"] | None:
        """Why the open batch is due to close, if it is (``by_size``: its size counts too; without pacing a batch
        closes on size as the reflection that fills it comes)."""
        if by_size and len(state.open_reflections) >= state.target_batch_size:
            return "size"
        assert state.opened_at is not None
        if now - state.opened_at >= max_wait_s:
            return "max_wait"
        if state.last_added_at is None:
            return None
        if playbook_id in drained and (idle_s is not None or by_size):
            # with pacing the reflector's word is enough without batch_idle_s: nothing more comes soon, and the
            # chain takes the batch only when it is free, so holding it longer makes no version sooner
            if now - state.last_added_at >= idle_after(state.mean_gap_s, idle_s if idle_s is not None else max_wait_s):
                return "idle"
        elif idle_s is not None and now - state.last_added_at >= idle_s:
            return "idle"
        return None

    def playbook_ids(self) -> list[str]:
        return sorted(self._playbooks)

    def open_count(self, playbook_id: str) -> int:
        return len(self._state(playbook_id).open_reflections)

    def _close(self, playbook_id: str, closed_by: Literal["size", "max_wait", "idle"],
               wall_time: datetime, now: float) -> ClosedBatch:
        """The open batch's oldest reflections (all of them without pacing, else up to the cap) as the next batch;
        the rest stay open, as a batch opened now."""
        state = self._state(playbook_id)
        held = state.open_reflections
        n = len(held) if self._pacing is None else self._pacing.take(len(held), state.target_batch_size)
        batch = deal_batch(
            playbook_id,
            state.next_batch_id,
            held[:n],
            self._config,
            target_batch_size=state.target_batch_size,
            closed_by=closed_by,
            closed_at=wall_time,
        )
        state.seen_trace_ids.batched(batch.manifest.trace_ids, batch.manifest.trace_digests)
        state.next_batch_id += 1
        state.open_reflections = held[n:]
        state.opened_at = now if state.open_reflections else None
        state.held = state.held if state.open_reflections else 0  # what is left arrived while batches waited
        return batch


def deal_as_manifest(manifest: BatchManifest, reflections: Mapping[str, Reflection], config: ShuffleConfig,
                     closed_at: datetime) -> ClosedBatch:
    """Deal a batch again exactly as its manifest says: its traces in its order, its p and its k, whatever the
    settings are now (a fan-in changed between a crash and the restart, or a plan recorded under another one, would
    otherwise deal other copies than the aggregators already hold), and its context lag (the version its aggregators
    read is the recorded one, whatever ``context_lag`` is set now)."""
    return deal_batch(manifest.playbook_id, manifest.batch_id, [reflections[t] for t in manifest.trace_ids],
                      replace(config, p=manifest.p, context_lag=manifest.context_lag),
                      target_batch_size=manifest.target_batch_size, closed_by=manifest.closed_by, closed_at=closed_at,
                      k=manifest.k)


class UnconfirmedBatches:
    """Restored batches whose copies may not all have been sent (a crash between manifest and copies).

    The batcher publishes a batch's manifest before its copies. After a restart it cannot tell whether every copy
    of its latest batches went out, but it can tell from redelivery: reflections are committed only once all copies
    are sent, so a batch whose reflections come back is one to re-send. When all of a restored batch's reflections
    are back, :meth:`collect` re-deals it exactly as the manifest says (same order, seed, target, closing time): the
    same copies, which aggregators recognise by copy_id. The last ``keep_per_playbook`` manifests are kept.
    """

    def __init__(self, config: ShuffleConfig, keep_per_playbook: int = 8) -> None:
        self._config = config
        self._keep = keep_per_playbook
        self._manifests: dict[str, dict[int, BatchManifest]] = {}
        self._batch_of: dict[str, dict[str, int]] = {}
        self._returned: dict[tuple[str, int], dict[str, Reflection]] = {}

    def restore(self, manifest: BatchManifest) -> None:
        """Remember a manifest read at startup (older ones beyond the last ``keep_per_playbook`` are dropped)."""
        manifests = self._manifests.setdefault(manifest.playbook_id, {})
        batch_of = self._batch_of.setdefault(manifest.playbook_id, {})
        manifests[manifest.batch_id] = manifest
        batch_of.update(dict.fromkeys(manifest.trace_ids, manifest.batch_id))
        while len(manifests) > self._keep:
            self._forget(manifest.playbook_id, min(manifests))

    def confirm_all(self) -> None:
        """Every batch not fully redelivered by now was confirmed (some of its reflections were committed, which
        happens only after all its copies went out): forget them all."""
        self._manifests.clear()
        self._batch_of.clear()
        self._returned.clear()

    def forget_playbook(self, playbook_id: str) -> None:
        for batch_id in list(self._manifests.get(playbook_id, {})):
            self._forget(playbook_id, batch_id)

    def batch_of(self, reflection: Reflection) -> int | None:
        """Id of the unconfirmed batch this reflection belongs to, if any."""
        return self._batch_of.get(reflection.playbook_id, {}).get(reflection.trace_id)

    def collect(self, reflection: Reflection) -> ClosedBatch | None:
        """Take a redelivered reflection of an unconfirmed batch; the re-dealt batch once all are back."""
        batch_id = self.batch_of(reflection)
        if batch_id is None:
            return None
        manifest = self._manifests[reflection.playbook_id][batch_id]
        returned = self._returned.setdefault((reflection.playbook_id, batch_id), {})
        returned[reflection.trace_id] = reflection
        if len(returned) < len(manifest.trace_ids):
            return None
        self._forget(reflection.playbook_id, batch_id)
        return deal_as_manifest(manifest, returned, self._config, manifest.closed_at)

    def _forget(self, playbook_id: str, batch_id: int) -> None:
        manifest = self._manifests[playbook_id].pop(batch_id)
        batch_of = self._batch_of[playbook_id]
        for trace_id in manifest.trace_ids:
            if batch_of.get(trace_id) == batch_id:
                del batch_of[trace_id]
        self._returned.pop((playbook_id, batch_id), None)
