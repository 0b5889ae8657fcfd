"""The served version: which playbook version an agent runs, read from the ``playbook`` and ``promoted`` logs (no
Kafka). :class:`ServedLog` keeps both logs' reading rules (docs/protocol.md: the first record of each version, and
of each decision id, counts); :func:`served_playbook` is the rule every follower applies: ``PlaybookFollower``
(``streams.topology.follower``; tests/unit/test_client.py holds the two to the same answers) and the Python client
``combee_client`` (which does not import the pipeline). With promotion on, the ``promoted`` pointer (or the canary
for an agent in the canary share); without, the newest version unless a decision on ``promoted`` holds it back
(``combee_core.guard.rule.served_without_promotion``). In review mode (``COMBEE_REVIEW_PLAYBOOKS``),
:func:`served_to_agents` is what every door serves of it: only the reviewed entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from combee_core.guard.rule import served_without_promotion
from combee_core.models import CurationState, PlaybookVersion, PromotionDecision, ReviewDecision
from combee_core.promote.promotion import PromotionLedger, in_canary
from combee_core.serve.review import ReviewBook, review_on, reviewed_view


def served_playbook(playbook_id: str, *, promotion: bool, newest: PlaybookVersion | None,
                    parents: Mapping[int, int], ledger: PromotionLedger, agent_id: str | None = None,
                    candidates: bool = False) -> PlaybookVersion | None:
    """The version an agent runs (None: the empty version 0). ``newest``: the newest version of the ``playbook`` log
    that counts; ``parents``: version -> parent_version of the playbook's versions; ``candidates``: run the newest
    candidate even with promotion on (``combee tail --candidates``)."""
    if promotion and not candidates:
        canary = ledger.canary(playbook_id)
        share = ledger.latest[playbook_id].canary_share if canary is not None else None
        if canary is not None and agent_id is not None and share and in_canary(agent_id, share):
            return canary
        return ledger.served(playbook_id)
    decision = ledger.latest.get(playbook_id)
    if decision is not None and not candidates:
        version = newest.version if newest else 0
        if served_without_promotion(ledger, playbook_id, parents, version) != version:
            return decision.served
    return newest


def served_to_agents(playbook_id: str, served: PlaybookVersion | None, *, review_playbooks: str,
                     book: ReviewBook) -> PlaybookVersion | None:
    """What agents get of ``served``: the version itself, or with review mode on for the playbook
    (``review_playbooks``, ``COMBEE_REVIEW_PLAYBOOKS``) only what the reviewers approved
    (``combee_core.serve.review.reviewed_view``). Every door serves this: ``combee serve`` (HTTP, MCP), the Python
    client, the pipeline's follower.

    A reviewed version carries no ``operations``, no entry ``aliases``, no pending ``challenges`` and no curation
    memory (all hold unreviewed texts: wordings, corrections, pairs kept apart) and the
    content hash of what it serves, so a decision that changes what is served changes its entity tag (caches
    refresh, waiters wake)."""
    if served is None or not review_on(review_playbooks, playbook_id):
        return served
    entries = [entry.model_copy(update={"aliases": []}) if entry.aliases else entry  # aliases are unreviewed texts
               for entry in reviewed_view(playbook_id, served.version, served.entries, book).entries]
    content_hash = PlaybookVersion.compute_hash(playbook_id, served.version, served.parent_version, served.batch_id,
                                                entries, [], served.lineage)
    return served.model_copy(update={"entries": entries, "operations": [], "challenges": [],
                                     "curation": CurationState(), "content_hash": content_hash})


@dataclass
class ServedLog:
    """The ``playbook``, ``promoted`` (and in review mode ``review``) logs of one or more playbooks, each read with
    its reading rule."""

    latest: dict[str, PlaybookVersion] = field(default_factory=dict)
    parents: dict[str, dict[int, int]] = field(default_factory=dict)
    ledger: PromotionLedger = field(default_factory=PromotionLedger)
    review_playbooks: str = ""
    """``COMBEE_REVIEW_PLAYBOOKS``: the playbooks whose agents get only reviewed entries."""
    review: ReviewBook = field(default_factory=ReviewBook)

    def take_version(self, version: PlaybookVersion) -> bool:
        """Take one ``playbook`` record in log order; False when it does not count (not the next version)."""
        current = self.latest.get(version.playbook_id)
        if version.version != (current.version if current else 0) + 1:
            return False
        self.latest[version.playbook_id] = version
        self.parents.setdefault(version.playbook_id, {})[version.version] = version.parent_version
        return True

    def take_decision(self, decision: PromotionDecision) -> bool:
        """Take one ``promoted`` record in log order; False when it does not count."""
        return self.ledger.apply(decision)

    def take_review(self, decision: ReviewDecision) -> bool:
        """Take one ``review`` record in log order; False for one already taken."""
        return self.review.apply(decision)

    def served(self, playbook_id: str, *, promotion: bool, agent_id: str | None = None,
               candidates: bool = False) -> PlaybookVersion | None:
        """:func:`served_playbook` for ``playbook_id`` from what was taken so far, as agents get it
        (:func:`served_to_agents`)."""
        served = served_playbook(playbook_id, promotion=promotion, newest=self.latest.get(playbook_id),
                                 parents=self.parents.get(playbook_id, {}), ledger=self.ledger, agent_id=agent_id,
                                 candidates=candidates)
        return served_to_agents(playbook_id, served, review_playbooks=self.review_playbooks, book=self.review)
