"""Which input partitions a stage member owns, one status per partition (:class:`PartitionOwnership`): the one
record the stage runtime (``streams.topology.runtime.Stage``) and the views (``streams.topology.views``) share, as
aiokafka's ``SubscriptionState`` is shared by its consumer, coordinator and fetcher.

A partition's life in a member (docs/architecture.md, "Scaling out: who owns what")::

    assign -> ASSIGNED --begin_restore--> RESTORING --end_restore--> ACTIVE --revoke--> REVOKING --revoked--> gone
                 |                            |
                 +--revoke--> gone            +--end_restore, a release meanwhile / assigned again--> ASSIGNED

- **ASSIGNED**: the group gave it; its records are paused until its state is rebuilt (the rebalance callback stays
  short, the main loop rebuilds).
- **RESTORING**: the main loop is rebuilding its state. A release of an *owned* partition meanwhile voids the
  restore (what was read may predate the release's writes): the partitions go back to ASSIGNED and are rebuilt
  again. The Kafka client's assignment at the end decides which restored partitions are still this member's.
- **ACTIVE**: owned: only these are handled, produced for and committed. One may be marked *stale* (another writer
  took a number first): the main loop releases it and assigns it again (:meth:`take_stale`).
- **REVOKING**: taken away; its work in flight is being stopped and its offsets fenced. Not owned any more.

Pure and generic over the partition type (the runtime uses aiokafka's ``TopicPartition``); no I/O, no Kafka import.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


class PartitionStatus(Enum):
    ASSIGNED = "assigned"
    RESTORING = "restoring"
    ACTIVE = "active"
    REVOKING = "revoking"


class RestoreInProgress(RuntimeError):
    """A restore began while another one was running (the runtime restores from its main loop only)."""


@dataclass
class _Partition:
    status: PartitionStatus
    again: bool = False
    """RESTORING, and assigned again after a release meanwhile: its restore must run once more before it is owned."""
    stale: bool = False
    expected: bool = False
    """Stale because of an operator's write (``combee playbook import``), not a fault (said at info level)."""


class PartitionOwnership(Generic[P]):
    """The partitions of one group member, each with its :class:`PartitionStatus` (see the module's docstring)."""

    def __init__(self) -> None:
        self._partitions: dict[P, _Partition] = {}
        self._releases = 0
        """Counts releases of owned partitions: a restore that saw one happen meanwhile owns nothing."""
        self._restore_from: int | None = None
        """``_releases`` when the running restore began; None when none runs."""

    def status(self, partition: P) -> PartitionStatus | None:
        """The partition's status, None when this member does not hold it."""
        entry = self._partitions.get(partition)
        return entry.status if entry is not None else None

    def owns(self, partition: P) -> bool:
        """ACTIVE: its state is rebuilt; this member handles, produces for and commits it."""
        return self.status(partition) is PartitionStatus.ACTIVE

    @property
    def owned(self) -> frozenset[P]:
        return self.with_status(PartitionStatus.ACTIVE)

    def with_status(self, status: PartitionStatus) -> frozenset[P]:
        return frozenset(p for p, entry in self._partitions.items() if entry.status is status)

    def awaits_restore(self, partition: P) -> bool:
        return self.status(partition) is PartitionStatus.ASSIGNED

    def assign(self, partitions: Iterable[P]) -> frozenset[P]:
        """The group assigned ``partitions``: those not owned wait for a restore. Returns them (to pause)."""
        waiting = frozenset(partitions) - self.owned
        for partition in waiting:
            entry = self._partitions.get(partition)
            if entry is not None and entry.status is PartitionStatus.RESTORING:
                entry.again = True
            elif entry is None or entry.status is not PartitionStatus.ASSIGNED:
                self._partitions[partition] = _Partition(PartitionStatus.ASSIGNED)
        return waiting

    def revoke(self, partitions: Iterable[P]) -> frozenset[P]:
        """The group took ``partitions`` away: those waiting are forgotten, the owned ones become REVOKING and are
        returned (to fence; :meth:`revoked` when done). A partition being restored stays so: the client no longer
        holds it, so :meth:`end_restore` drops it."""
        fencing = set()
        for partition in set(partitions):
            entry = self._partitions.get(partition)
            if entry is None:
                continue
            if entry.status is PartitionStatus.ASSIGNED:
                del self._partitions[partition]
            elif entry.status is PartitionStatus.RESTORING:
                entry.again = False
            elif entry.status is PartitionStatus.ACTIVE:
                self._partitions[partition] = _Partition(PartitionStatus.REVOKING)
                fencing.add(partition)
        if fencing:
            self._releases += 1
        return frozenset(fencing)

    def revoked(self, partitions: Iterable[P]) -> None:
        """The fence of REVOKING ``partitions`` is done: forget them (one assigned again meanwhile stays)."""
        for partition in partitions:
            if self.status(partition) is PartitionStatus.REVOKING:
                del self._partitions[partition]

    def begin_restore(self) -> frozenset[P]:
        """The partitions waiting for their state to be rebuilt, now RESTORING (empty: nothing to do)."""
        if self._restore_from is not None:
            raise RestoreInProgress("a restore is already running")
        pending = self.with_status(PartitionStatus.ASSIGNED)
        if pending:
            self._restore_from = self._releases
            for partition in pending:
                self._partitions[partition] = _Partition(PartitionStatus.RESTORING)
        return pending

    def end_restore(self, held: Iterable[P]) -> frozenset[P]:
        """The restore succeeded; ``held``: the Kafka client's assignment now. Returns the partitions now ACTIVE:
        none when an owned partition was released meanwhile (the held ones wait for a restore again)."""
        voided = self._restore_from != self._releases
        return self._finish(set(held), lambda entry: voided or entry.again)

    def retry_restore(self, held: Iterable[P]) -> None:
        """The restore could not finish (the broker did not answer): the held partitions wait for it again."""
        self._finish(set(held), lambda _entry: True)

    def abandon_restore(self) -> None:
        """The restore failed (the stage stops): forget the partitions it was restoring."""
        self._finish(set(), lambda _entry: True)

    def _finish(self, held: set[P], wait_again: Callable[[_Partition], bool]) -> frozenset[P]:
        activated = set()
        for partition in self.with_status(PartitionStatus.RESTORING):
            entry = self._partitions[partition]
            if partition not in held:
                del self._partitions[partition]
            elif wait_again(entry):
                self._partitions[partition] = _Partition(PartitionStatus.ASSIGNED)
            else:
                self._partitions[partition] = _Partition(PartitionStatus.ACTIVE)
                activated.add(partition)
        self._restore_from = None
        return frozenset(activated)

    def mark_stale(self, partition: P, *, expected: bool = False) -> None:
        """An owned partition's state was found stale: :meth:`take_stale` hands it to the main loop's reset.
        Ignored for a partition not owned (released meanwhile: its next owner rebuilds anyway)."""
        entry = self._partitions.get(partition)
        if entry is not None and entry.status is PartitionStatus.ACTIVE:
            entry.stale = True
            entry.expected = entry.expected or expected

    def take_stale(self) -> tuple[frozenset[P], bool]:
        """The owned partitions marked stale (their marks cleared) and whether every one was expected."""
        stale = {p: entry for p, entry in self._partitions.items()
                 if entry.stale and entry.status is PartitionStatus.ACTIVE}
        expected = bool(stale) and all(entry.expected for entry in stale.values())
        for entry in stale.values():
            entry.stale = entry.expected = False
        return frozenset(stale), expected
