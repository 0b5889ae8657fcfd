"""The guard's decisions (no Kafka): per playbook, live traces in the order of its ``traces`` partition are added to
the sample of the version they name; after each one, every watched version it concerns is tested against its parent
(``combee_core.guard.rule``). The first crossing is a rollback to the parent on ``promoted``, by ``guard``, paused,
with the test's statistics; then nothing more is judged until an operator's ``combee promote`` resumes.

Watched: with no decision on ``promoted``, every version; after one, the versions built after it on a clean version
(``combee_core.guard.rule.clean``), and none while the playbook is paused. A trace naming a version the guard has not
seen yet waits (with every later trace of its playbook) until the version is seen, so that a verdict is a function of
the logs; one naming a version that does not exist is dropped and counted (:meth:`Guard.drop_unknown`). Only the
traces of the versions from :meth:`Guard.floor` on can still move a verdict: a restart reads ``traces`` from there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

from combee_core.guard.rule import GUARD, GuardRule, Sample, alarms, clean, msprt_log_lr, served_without_promotion
from combee_core.log_order import ContiguousNumbers
from combee_core.models import LiveTest, PlaybookVersion, PromotionDecision
from combee_core.processors.effects import Count, Effect, Publish
from combee_core.promote.promotion import PromotionLedger
from combee_core.topology import Topic

KEEP_VERSIONS = 64
"""Full versions kept per playbook (the newest ones and the served one): a rollback serves one of them."""


@dataclass(frozen=True)
class Alarm:
    """The first crossing on a playbook: the version judged, its parent, and the statistics there."""

    version: int
    parent: int
    test: LiveTest


class Guard:
    """Live traces, versions and decisions in; a rollback decision out."""

    def __init__(self, rule: GuardRule) -> None:
        self.rule = rule
        self.ledger = PromotionLedger()
        self.parents: dict[str, dict[int, int]] = {}
        self.children: dict[str, dict[int, list[int]]] = {}
        self.versions: dict[str, dict[int, PlaybookVersion]] = {}
        self.samples: dict[str, dict[int, Sample]] = {}
        self.pending: dict[str, deque[tuple[int, float]]] = {}
        self.alarm: dict[str, Alarm] = {}
        self._gate = ContiguousNumbers[str](start=1)
        self._zero_dropped: set[str] = set()
        """Playbooks whose version 0 is no longer kept (it is on no log: :meth:`kept`)."""

    # ------------------------------------------------------------------------------------------ the logs

    def apply_version(self, version: PlaybookVersion) -> None:
        playbook_id, number = version.playbook_id, version.version
        if not self._gate.accept(playbook_id, number):
            return
        self.parents.setdefault(playbook_id, {})[number] = version.parent_version
        self.children.setdefault(playbook_id, {}).setdefault(version.parent_version, []).append(number)
        kept = self.versions.setdefault(playbook_id, {})
        kept[number] = version
        served = self.ledger.served_version(playbook_id)
        for old in [v for v in kept if v <= number - KEEP_VERSIONS and v != served]:
            del kept[old]
        if number >= KEEP_VERSIONS and not (playbook_id in self.ledger.latest and served == 0):
            self._zero_dropped.add(playbook_id)

    def kept(self, playbook_id: str, version: int) -> bool:
        """Whether ``version`` is still kept, so that a version built on it can be judged: one of the newest
        :data:`KEEP_VERSIONS` or the one served when a newer one came. Version 0 (empty, on no log) by the same rule:
        once version ``KEEP_VERSIONS`` exists, unless a decision serves it then."""
        if version == 0:
            return playbook_id not in self._zero_dropped
        return version in self.versions.get(playbook_id, {})

    def apply_decision(self, decision: PromotionDecision) -> bool:
        """A record of ``promoted``; True when it counts. A decision that counts ends the alarm it answers (or
        makes it moot)."""
        counts = self.ledger.apply(decision)
        if counts:
            self.alarm.pop(decision.playbook_id, None)
        return counts

    def newest(self, playbook_id: str) -> int:
        return self._gate.next(playbook_id) - 1

    def observe(self, playbook_id: str, version: int, value: float) -> None:
        """One live trace's value (success as 0/1, or score), in log order."""
        self.pending.setdefault(playbook_id, deque()).append((version, value))

    # ------------------------------------------------------------------------------------------ judging

    def advance(self, playbook_id: str) -> None:
        """Take the waiting traces whose version is known, in order, testing after each one."""
        queue = self.pending.get(playbook_id)
        while queue and queue[0][0] <= self.newest(playbook_id):
            version, value = queue.popleft()
            self.samples.setdefault(playbook_id, {}).setdefault(version, Sample()).add(value)
            if playbook_id not in self.alarm:
                self._test(playbook_id, version)

    def drop_unknown(self, playbook_id: str) -> list[Effect]:
        """With the view of ``playbook`` caught up: drop the waiting traces that name a version that does not exist
        (then take the rest)."""
        queue = self.pending.get(playbook_id)
        dropped = 0
        while queue and queue[0][0] > self.newest(playbook_id):
            queue.popleft()
            dropped += 1
            self.advance(playbook_id)
        return [Count("guard_unknown_version", dropped)] if dropped else []

    def waiting(self, playbook_id: str) -> bool:
        """Traces wait for a version the guard has not seen."""
        return bool(self.pending.get(playbook_id))

    def watched(self, playbook_id: str, version: int) -> bool:
        decision = self.ledger.latest.get(playbook_id)
        parent = self.parents.get(playbook_id, {}).get(version)
        if version < 1 or parent is None or not self.kept(playbook_id, parent):
            return False  # version 0, one not seen, or one whose parent is no longer kept (too old to judge)
        if decision is None:
            return True
        return (not decision.paused and version > self.ledger.named.get(playbook_id, 0)
                and clean(version, self.ledger, playbook_id, self.parents.get(playbook_id, {})))

    def floor(self, playbook_id: str) -> int:
        """The lowest version whose traces the guard can still need: the oldest version it keeps (:meth:`kept`,
        version 0 included while kept) or the served one, else the next one. A restart reads each ``traces``
        partition from its first trace of a version at or above its playbook's floor
        (``streams.topology.views.live_traces``).

        Why that decides as a guard that read everything: a test compares a watched version with its parent, and a
        watched version's parent is kept (:meth:`watched`), so both are at or above the floor; their samples are read
        again from their first trace, in the same order, so every test of a watched pair sees the same samples after
        the same trace, and the first crossing (an alarm pending at the checkpoint included: its version and parent
        are such a pair) is the same trace with the same statistics. A trace below the floor that is read again (it
        follows the first trace of a version at the floor) adds to a version that is not watched and is no watched
        version's parent, so it moves no test. Versions seen later are newer than every one seen, so above the floor;
        and the floor only rises (a version dropped is never kept again), but for the case below.

        Why every kept version, not only the watched ones and their parents: a kept version can become a parent
        after the checkpoint (an operator's ``combee promote`` or ``rollback`` serves it, the next version is built
        on it and judged against it from its first trace on). The saving would be at most ``KEEP_VERSIONS``
        versions' traces.

        Not covered: an operator serving a version this guard no longer kept. A guard that starts then keeps it or
        not depending on the order in which its views of ``playbook`` and ``promoted`` are read (so does one reading
        from the beginning), and may judge the next version against a sample it did not read whole. The served
        version counts in the floor for that case (the floor then falls to it), which keeps its traces read since
        the decision, not the ones before the checkpoints already written."""
        kept = list(self.versions.get(playbook_id, {})) + ([0] if self.kept(playbook_id, 0) else [])
        if playbook_id in self.ledger.latest:
            kept.append(self.ledger.served_version(playbook_id))
        return min(kept, default=self.newest(playbook_id) + 1)

    def _test(self, playbook_id: str, version: int) -> None:
        """Test the watched versions this trace's version concerns: itself against its parent, its children
        against it."""
        parents = self.parents.get(playbook_id, {})
        for child in [version, *self.children.get(playbook_id, {}).get(version, [])]:
            if not self.watched(playbook_id, child):
                continue
            samples = self.samples.setdefault(playbook_id, {})
            child_sample, parent_sample = samples.get(child, Sample()), samples.get(parents[child], Sample())
            if alarms(self.rule, child_sample, parent_sample):
                self.alarm[playbook_id] = Alarm(child, parents[child], self._statistics(child, parents[child],
                                                                                        child_sample, parent_sample))
                return

    def _statistics(self, version: int, parent: int, child: Sample, parent_sample: Sample) -> LiveTest:
        rule = self.rule
        return LiveTest(metric=rule.metric, version=version, parent_version=parent, traces=child.n,
                        parent_traces=parent_sample.n, mean=child.mean, parent_mean=parent_sample.mean,
                        log_lr=msprt_log_lr(child, parent_sample, rule.tau), threshold=rule.threshold,
                        alpha=rule.alpha, tau=rule.tau, min_traces=rule.min_traces)

    def decide(self, playbook_id: str, now: datetime) -> list[Effect]:
        """The rollback the playbook's alarm calls for, while it still applies (no decision since made it moot)."""
        alarm = self.alarm.get(playbook_id)
        if alarm is None:
            return []
        if not self.watched(playbook_id, alarm.version):
            del self.alarm[playbook_id]
            return []
        decision = rollback(self.rule, self.ledger, playbook_id, alarm, self.newest(playbook_id),
                            self.parents.get(playbook_id, {}), self.versions.get(playbook_id, {}), now)
        return [Publish(Topic.PROMOTED, playbook_id, decision, number=(playbook_id, decision.decision_id)),
                Count("decisions.guard-rollback")]

    def playbooks(self) -> list[str]:
        return sorted(set(self.pending) | set(self.alarm))


def rollback(rule: GuardRule, ledger: PromotionLedger, playbook_id: str, alarm: Alarm, newest: int,
             parents: dict[int, int], versions: dict[int, PlaybookVersion], now: datetime) -> PromotionDecision:
    """The guard's rollback of ``alarm.version`` to its parent: served, paused until ``combee promote``."""
    test = alarm.test
    judged = versions.get(alarm.version)
    served = versions.get(alarm.parent) if alarm.parent else None
    unit = "success rate" if test.metric == "success" else "mean score"
    return PromotionDecision(
        playbook_id=playbook_id, decision_id=ledger.next_id(playbook_id), action="rollback",
        candidate_version=alarm.version, candidate_hash=judged.content_hash if judged else None,
        served_version=alarm.parent, served=served, newest_version=newest,
        previous_version=served_without_promotion(ledger, playbook_id, parents, newest),
        rule=rule.describe(), paused=True, live_test=test, by=GUARD, decided_at=now,
        reason=(f"live {unit} of v{alarm.version} {test.mean:.3f} over {test.traces} traces vs its parent "
                f"v{alarm.parent} {test.parent_mean:.3f} over {test.parent_traces}: log LR {test.log_lr:.2f} >= "
                f"{test.threshold:.2f} (alpha {test.alpha:g}); rolled back to v{alarm.parent}, paused until "
                "`combee promote`"))
