"""What the root reducer knows from its logs, and the decisions it takes from them: each playbook's newest version,
the manifests of batches not yet in a version, the promotion ledger, and so what the next version is built on
(:meth:`ReducerLogs.base`) and which batches are stalled (:meth:`ReducerLogs.stalled`).

Fed in log order by the reducer stage's views of ``playbook``, ``batches`` and ``promoted`` (records that count);
pure, no Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from combee_core.guard.rule import guarded_base
from combee_core.models import BatchManifest, PlaybookVersion, PromotionDecision
from combee_core.playbook import Playbook
from combee_core.promote.promotion import PromotionLedger, next_base


@dataclass(frozen=True)
class StalledBatch:
    playbook_id: str
    manifest: BatchManifest
    age_s: float


@dataclass
class ReducerLogs:
    """The reducer's state, as its logs say (``promotion``: versions are built on the served version after the
    decision on the newest one, ``combee_core.promote.promotion.next_base``)."""

    promotion: bool = False
    playbooks: dict[str, Playbook] = field(default_factory=dict)
    published_at: dict[str, datetime] = field(default_factory=dict)
    """Per playbook, when its latest version was published (a sync fleet's round time ends at the next)."""
    manifests: dict[str, dict[int, BatchManifest]] = field(default_factory=dict)
    """Per playbook, the valid manifests of batches not yet in a version."""
    parents: dict[str, dict[int, int]] = field(default_factory=dict)
    """Per playbook, version -> parent_version (``combee_core.guard.rule.clean``)."""
    ledger: PromotionLedger = field(default_factory=PromotionLedger)
    """The ``promoted`` log, which says what the next version is built on (without promotion: after a rollback)."""
    _stall_reported: set[tuple[str, int]] = field(default_factory=set)

    def playbook(self, playbook_id: str) -> Playbook:
        """The newest version of the playbook (empty before the first)."""
        if playbook_id not in self.playbooks:
            self.playbooks[playbook_id] = Playbook.empty(playbook_id)
        return self.playbooks[playbook_id]

    def take_version(self, version: PlaybookVersion) -> None:
        """A version that counts: it is the newest, and the manifests of the batches it covers are done."""
        playbook_id = version.playbook_id
        self.parents.setdefault(playbook_id, {})[version.version] = version.parent_version
        self.playbooks[playbook_id] = Playbook.from_entries(playbook_id, version.version, version.entries,
                                                            version.next_entry_number, version.curation,
                                                            baseline=version.baseline, challenges=version.challenges)
        self.published_at[playbook_id] = version.published_at
        waiting = self.manifests.get(playbook_id, {})
        for batch_id in [b for b in waiting if b < version.version]:
            del waiting[batch_id]

    def take_manifest(self, manifest: BatchManifest) -> bool:
        """A manifest that counts; True when its batch is not in a version yet (it is kept until it is)."""
        if manifest.batch_id < self.playbook(manifest.playbook_id).version:
            return False
        self.manifests.setdefault(manifest.playbook_id, {})[manifest.batch_id] = manifest
        return True

    def take_decision(self, decision: PromotionDecision) -> bool:
        """A record of ``promoted``; True when it counts (the version waiting for it may now be built on)."""
        return self.ledger.apply(decision)

    def base(self, playbook_id: str) -> tuple[Playbook, int | None] | None:
        """What the next version is built on, and the parent version to record (None: the newest): the newest
        version, or with ``promotion`` the version served after the decision on it (None while that decision is not
        on the log yet); without promotion, the served version after a rollback (``guarded_base``)."""
        playbook = self.playbook(playbook_id)
        if not self.promotion:
            return guarded_base(playbook, self.ledger, self.parents.get(playbook_id, {}))
        base = next_base(self.ledger, playbook_id, playbook.version)
        if base is None:
            return None
        if base.entries is None:
            return playbook, base.parent_version
        return Playbook.from_entries(playbook_id, playbook.version, base.entries, playbook.next_entry_number,
                                     playbook.curation,
                                     baseline=playbook.baseline,  # outcomes are the traces', whatever was served
                                     challenges=playbook.challenges), base.parent_version

    def stalled(self, owned: set[str], now: datetime, warning_s: float) -> list[StalledBatch]:
        """The oldest waiting batch of each owned playbook once it has waited longer than ``warning_s`` for its
        version, each reported once."""
        found = []
        for playbook_id, waiting in self.manifests.items():
            if not waiting or playbook_id not in owned:
                continue
            oldest = waiting[min(waiting)]
            age = (now - oldest.closed_at).total_seconds()
            key = (playbook_id, oldest.batch_id)
            if age > warning_s and key not in self._stall_reported:
                self._stall_reported.add(key)
                found.append(StalledBatch(playbook_id, oldest, age))
        return found
