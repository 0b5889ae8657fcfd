"""The partition-ownership record the stage runtime keeps (``combee_core.partitions.ownership``): any sequence of
what a group member lives through (assignments and revocations at any time, also during a restore; restores that
succeed, are retried or fail; stale marks and their resets) keeps what "nothing lost, no duplicate" rests on, and
decides as the runtime's four sets did before it (``FourSets`` below is that code, kept as the reference, with the
one change: a partition assigned again during its restore is restored once more before it is owned, where the four
sets owned it at once and restored it again right after)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from combee_core.partitions.ownership import PartitionOwnership, PartitionStatus, RestoreInProgress

PARTITIONS = st.frozensets(st.integers(0, 3))


class FourSets:
    """``Stage``'s ownership before ``PartitionOwnership``: assigned, to rebuild, stale, stale expected (and a
    release counter), transcribed from its release / acquire / rebuild / mark_stale / reset_stale, with the one change
    marked in :meth:`end`."""

    def __init__(self) -> None:
        self.assigned: set[int] = set()
        self.to_rebuild: set[int] = set()
        self.stale: set[int] = set()
        self.stale_expected: set[int] = set()
        self.releases = 0
        self.pending: set[int] = set()
        self.began_at = 0

    def release(self, revoked: set[int]) -> set[int]:
        self.to_rebuild -= revoked
        revoked = revoked & self.assigned
        if revoked:
            self.releases += 1
            self.assigned -= revoked
            self.stale -= revoked
        return revoked

    def acquire(self, assigned: set[int]) -> set[int]:
        assigned = assigned - self.assigned
        self.to_rebuild |= assigned
        return assigned

    def begin(self) -> set[int]:
        self.pending, self.to_rebuild = self.to_rebuild, set()
        self.began_at = self.releases
        return self.pending

    def end(self, held: set[int]) -> set[int]:
        owned = self.pending & held
        if self.began_at != self.releases:
            self.to_rebuild |= owned
            return set()
        owned -= self.to_rebuild  # the change: assigned again during its restore, it is restored again first
        self.assigned |= owned
        return owned

    def retry(self, held: set[int]) -> None:
        self.to_rebuild |= self.pending & held

    def mark_stale(self, tp: int, expected: bool) -> None:
        if tp in self.assigned:
            self.stale.add(tp)
            if expected:
                self.stale_expected.add(tp)

    def take_stale(self) -> tuple[set[int], bool]:
        stale, self.stale = self.stale & self.assigned, set()
        expected, self.stale_expected = self.stale_expected, set()
        return stale, bool(stale) and stale <= expected


class OwnershipMachine(RuleBasedStateMachine):
    """One member: the Kafka client's assignment and pauses (``held``, ``paused``), the ownership, the reference."""

    def __init__(self) -> None:
        super().__init__()
        self.ownership = PartitionOwnership[int]()
        self.reference = FourSets()
        self.held: set[int] = set()
        self.paused: set[int] = set()
        self.restoring: frozenset[int] | None = None
        self.released_during_restore = False

    def _assign(self, partitions: set[int]) -> None:
        self.held |= partitions
        waiting = self.ownership.assign(partitions)
        assert waiting == self.reference.acquire(set(partitions))
        self.paused |= waiting

    def _revoke(self, partitions: set[int]) -> None:
        self.held -= partitions  # the client drops them before the release runs
        self.paused -= partitions
        fencing = self.ownership.revoke(partitions)
        assert fencing == self.reference.release(set(partitions))
        assert all(self.ownership.status(p) is PartitionStatus.REVOKING for p in fencing)
        assert not fencing & self.ownership.owned, "a partition being fenced is not owned"
        self.released_during_restore |= bool(fencing) and self.restoring is not None
        self.ownership.revoked(fencing)

    @rule(partitions=PARTITIONS)
    def assign(self, partitions: frozenset[int]) -> None:
        self._assign(set(partitions))

    @rule(partitions=PARTITIONS)
    def revoke(self, partitions: frozenset[int]) -> None:
        self._revoke(set(partitions))

    @precondition(lambda self: self.restoring is None)
    @rule()
    def begin_restore(self) -> None:
        pending = self.ownership.begin_restore()
        assert pending == self.reference.begin()
        if pending:
            self.restoring, self.released_during_restore = pending, False
            try:
                self.ownership.begin_restore()
            except RestoreInProgress:
                pass
            else:
                raise AssertionError("a second restore began while one runs")

    @precondition(lambda self: self.restoring is not None)
    @rule()
    def end_restore(self) -> None:
        assert self.restoring is not None
        active = self.ownership.end_restore(self.held)
        before = self.reference.end(set(self.held))
        assert active == before
        assert active <= self.restoring, "owned only after a restore that began after its latest assignment"
        if self.released_during_restore:
            assert not active, "a release during a restore voids it"
        self.paused -= active
        self.restoring = None

    @precondition(lambda self: self.restoring is not None)
    @rule()
    def retry_restore(self) -> None:
        self.ownership.retry_restore(self.held)
        self.reference.retry(set(self.held))
        self.restoring = None

    @precondition(lambda self: self.restoring is not None)
    @rule()
    def abandon_restore(self) -> None:
        self.ownership.abandon_restore()
        self.restoring = None
        assert not self.ownership.with_status(PartitionStatus.RESTORING)
        self.reference = FourSets()  # the stage stops: the runtime's state after a failure is not compared
        self.ownership = PartitionOwnership[int]()
        self.held, self.paused = set(), set()

    @rule(partition=st.integers(0, 3), expected=st.booleans())
    def mark_stale(self, partition: int, expected: bool) -> None:
        self.ownership.mark_stale(partition, expected=expected)
        self.reference.mark_stale(partition, expected)

    @precondition(lambda self: self.restoring is None)
    @rule()
    def reset_stale(self) -> None:
        stale, expected = self.ownership.take_stale()
        assert (set(stale), expected) == self.reference.take_stale()
        assert stale <= self.ownership.owned
        fencing = self.ownership.revoke(stale)  # as Stage.reset_stale: release, then assign again what is held
        assert fencing == self.reference.release(set(stale))
        self.ownership.revoked(fencing)
        for partition in stale & self.held:
            waiting = self.ownership.assign({partition})
            assert waiting == self.reference.acquire({partition})
            self.paused |= waiting

    @invariant()
    def owns_only_what_the_client_holds_and_fetches_only_what_it_owns(self) -> None:
        owned = self.ownership.owned
        assert owned <= self.held, "never owns a partition the client does not hold"
        assert not owned & self.paused, "every owned partition is fetched"
        assert self.held - owned <= self.paused, "no record of a held partition not owned is fetched"
        assert all(self.ownership.owns(p) == (p in owned) for p in range(4))

    @invariant()
    def decides_as_the_four_sets_did(self) -> None:
        reference = self.reference
        assert self.ownership.owned == reference.assigned
        restoring = self.restoring or set()  # one assigned again while restoring waits in the reference already
        waiting = self.ownership.with_status(PartitionStatus.ASSIGNED)
        assert waiting == reference.to_rebuild - restoring
        assert all(self.ownership.awaits_restore(p) == (p in waiting) for p in range(4))
        assert not self.ownership.with_status(PartitionStatus.REVOKING), "a finished release forgets what it fenced"


OwnershipMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
test_ownership_keeps_the_invariants_and_decides_as_the_four_sets_did = OwnershipMachine.TestCase


def test_a_partition_assigned_again_during_its_restore_is_restored_once_more_before_it_is_owned():
    """Revoked and assigned again while its state was being rebuilt: what was read may predate the other owner's
    writes, so it waits (paused) for one more restore instead of being owned at once."""
    ownership = PartitionOwnership[str]()
    ownership.assign({"p"})
    assert ownership.begin_restore() == {"p"}
    ownership.revoke({"p"})
    assert ownership.assign({"p"}) == {"p"}
    assert ownership.end_restore({"p"}) == frozenset()
    assert ownership.status("p") is PartitionStatus.ASSIGNED
    assert ownership.begin_restore() == {"p"}
    assert ownership.end_restore({"p"}) == {"p"}
    assert ownership.owns("p")


def test_a_stale_mark_on_a_partition_released_since_is_dropped():
    ownership = PartitionOwnership[str]()
    ownership.assign({"p"})
    ownership.begin_restore()
    ownership.end_restore({"p"})
    ownership.mark_stale("p", expected=True)
    ownership.revoked(ownership.revoke({"p"}))
    ownership.assign({"p"})
    ownership.begin_restore()
    ownership.end_restore({"p"})
    ownership.mark_stale("p")
    assert ownership.take_stale() == ({"p"}, False), "the import's mark went with the release"
