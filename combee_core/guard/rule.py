"""The live-trace guard's rule (no Kafka): does a served version do significantly worse than its parent?

Without an evaluator the only signal is what agents report: the success (or score) of live traces that name the
version they ran. :func:`msprt_log_lr` is a mixture sequential probability ratio test (mSPRT; Johari, Koomen,
Pekelis and Walsh, "Always valid inference", 2017/2022) on the difference of means ``D = child - parent``, with a
normal approximation and a normal mixture N(0, tau^2) over the true difference:

    log L = 1/2 log(V / (V + tau^2)) + tau^2 D^2 / (2 V (V + tau^2)),   V = s^2 (1/n_child + 1/n_parent)

(``s^2`` the pooled variance of both samples, the variance of one trace under "no difference"). ``L`` is the
likelihood ratio of "some difference" to "none", averaged over the mixture: under no difference it is a martingale
in the Gaussian model, so the chance it ever reaches ``1/alpha`` is at most ``alpha`` (Ville's inequality) however
often it is looked at. The guard alarms only on a *drop* (``D < 0``) once ``L >= 1/alpha`` and each side has
``min_traces`` traces; both approximations (normal data, plugged-in variance) make ``alpha`` nominal: the false-alarm
rate and the power are measured by simulation (``bench/guard_error_rates.py``, ``tests/unit/test_guard.py``).

:func:`clean` and :func:`served_without_promotion` say, from the ``promoted`` pointer and the versions' parents,
which version agents run with promotion off and what the reducer builds on: after a rollback, no version built on
a rolled-back one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from combee_core.playbook import Playbook
from combee_core.promote.promotion import PromotionLedger

GUARD = "guard"
"""The ``by`` of the guard's decisions on ``promoted``."""

Metric = Literal["success", "score"]


@dataclass(frozen=True)
class GuardRule:
    """Alarm when the mSPRT of child vs parent reaches ``1/alpha`` with the child worse, after ``min_traces`` on
    each side. ``tau``: the spread of the differences the test is tuned to find (the mixture's sd)."""

    alpha: float = 0.01
    tau: float = 0.1
    min_traces: int = 30
    metric: Metric = "success"

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1 or self.tau <= 0 or self.min_traces < 2:
            raise ValueError(f"invalid guard rule {self}")

    @property
    def threshold(self) -> float:
        """log(1/alpha): the log likelihood ratio at which the guard alarms."""
        return math.log(1 / self.alpha)

    def describe(self) -> str:
        return (f"guard: mSPRT on live {self.metric}, child vs parent, alarm on a drop when LR >= 1/{self.alpha:g} "
                f"(tau {self.tau:g}, at least {self.min_traces} traces each)")


@dataclass
class Sample:
    """Running sums of one version's live values (success as 0/1, or score)."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.total_sq += value * value

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0


def pooled_variance(a: Sample, b: Sample) -> float:
    """Variance of one value of both samples taken together (their common variance under no difference)."""
    n = a.n + b.n
    if n < 2:
        return 0.0
    mean = (a.total + b.total) / n
    return max(0.0, (a.total_sq + b.total_sq) / n - mean * mean) * n / (n - 1)


def msprt_log_lr(child: Sample, parent: Sample, tau: float) -> float:
    """log of the mixture likelihood ratio of "child and parent differ" to "they do not" (0 when it cannot be
    told: an empty side or no variance at all)."""
    if child.n == 0 or parent.n == 0:
        return 0.0
    v = pooled_variance(child, parent) * (1 / child.n + 1 / parent.n)
    if v <= 0:
        return 0.0
    d = child.mean - parent.mean
    t2 = tau * tau
    return 0.5 * math.log(v / (v + t2)) + t2 * d * d / (2 * v * (v + t2))


def alarms(rule: GuardRule, child: Sample, parent: Sample) -> bool:
    """The child does significantly worse than its parent, by the rule."""
    if child.n < rule.min_traces or parent.n < rule.min_traces or child.mean >= parent.mean:
        return False
    return msprt_log_lr(child, parent, rule.tau) >= rule.threshold


# ---------------------------------------------------------------------------------------------- lineage


def clean(version: int, ledger: PromotionLedger, playbook_id: str, parents: Mapping[int, int]) -> bool:
    """Whether ``version`` may be served or built on, with promotion off, after the latest decision on
    ``promoted``: it is the served version, or it was built after every decision on a clean version. A version that
    existed when a decision was made (rolled back, or passed over: up to ``PromotionLedger.named``) is not, nor is
    any version built on one.
    ``parents``: version -> parent_version (a version newer than every decision whose parent is not known counts as
    built after them: a checkpointed view holds only the newest versions)."""
    decision = ledger.latest.get(playbook_id)
    if decision is None:
        return True
    served, existed = decision.served_version, ledger.named.get(playbook_id, 0)
    while version != served:
        if version <= existed:
            return False
        if version not in parents:
            return True
        version = parents[version]
    return True


def served_without_promotion(ledger: PromotionLedger, playbook_id: str, parents: Mapping[int, int],
                             newest: int) -> int:
    """The version agents run with promotion off: the newest, unless a decision is on ``promoted``; then its served
    version while the playbook is paused (a rollback), else the newest version if it is clean, else the served one
    (``combee promote V`` serves V and then what is built on it from then on)."""
    decision = ledger.latest.get(playbook_id)
    if decision is None:
        return newest
    if decision.paused or not clean(newest, ledger, playbook_id, parents):
        return decision.served_version
    return newest


def guarded_base(playbook: Playbook, ledger: PromotionLedger,
                 parents: Mapping[int, int]) -> tuple[Playbook, int | None]:
    """What the reducer builds the next version on with promotion off: the newest version (``playbook``), unless a
    decision on ``promoted`` makes it unclean (it was rolled back, or built on one that was); then the served
    version's entries, recorded as the new version's parent (its number stays the next one, entry ids keep
    counting). Returns (base, parent_version; None: the newest)."""
    decision = ledger.latest.get(playbook.playbook_id)
    if decision is None or clean(playbook.version, ledger, playbook.playbook_id, parents):
        return playbook, None
    entries = list(decision.served.entries) if decision.served is not None else []
    return (Playbook.from_entries(playbook.playbook_id, playbook.version, entries, playbook.next_entry_number,
                                  playbook.curation, baseline=playbook.baseline, challenges=playbook.challenges),
            decision.served_version)
