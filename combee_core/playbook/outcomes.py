"""Outcome credit: what the traces agents send say about each entry's effect on success.

A trace with an outcome (``success``, else a ``score`` in [0, 1]) is one :class:`TraceOutcome`, taken from the trace
by the reflector role (never from a model's answer) and carried through its reflection and the partials; the reducer
counts it once however many shuffle copies or partials carry it (:func:`distinct_outcomes`). Each version, in this
order (:func:`with_outcomes`):

1. every count (the playbook's baseline and each entry's) is multiplied by the decay (default 99/100 a version, a
   half-life of about 69 versions) and rounded down;
2. each trace of the batch adds its outcome to the baseline (used entries or not: a trace without
   ``used_entries`` counts toward the baseline only), and to every entry its agent used that existed in the version
   it ran (an id created later cannot have been used, and is ignored).

Counts are integers in thousandths of a trace (:data:`UNIT`), so the arithmetic is exact and does not depend on the
order of traces: a replay reproduces every count byte for byte. The estimate (:func:`credit`) is a Beta(1 + s,
1 + f) posterior of success when the entry was used against the same posterior of the baseline; decisions compare
exact rationals (:class:`fractions.Fraction`) of the counts, floats are only for display.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from combee_core.models import OutcomeTally, PlaybookEntry, Trace, TraceOutcome
from combee_core.playbook.value import Playbook

UNIT = 1000
"""One trace, in the counts' unit (thousandths of a trace)."""

DEFAULT_DECAY = Fraction(99, 100)
"""What a count keeps of itself each version (half-life: ln 2 / -ln 0.99, about 69 versions)."""

MIN_USES = 10
"""Uses (decayed traces) each side needs before outcomes alone settle a contradiction between two entries: a
success rate from n uses has a standard error up to 0.5/sqrt(n), 0.16 at 10 (as ``eviction_min_evidence``)."""

DECISIVE_Z = 2
"""Two success rates differ when their difference exceeds this many standard deviations of it."""

DEMOTION_Z = 3
"""An entry is measurably worse than the baseline when its success rate is below the baseline's by more than this
many standard deviations of the difference (:func:`worse_than_baseline`). Three, not :data:`DECISIVE_Z`'s two:
every entry is tested again each version, and at 3 sd a one-sided normal test errs 0.13% of the time per look
(2.3% at 2 sd), so an entry at the baseline is rarely removed by a run of looks at noise."""


def trace_outcome(trace: Trace, used: Iterable[str]) -> TraceOutcome | None:
    """The outcome of ``trace`` with the ids of its own playbook's entries it ``used``, or None when the trace
    states neither ``success`` nor a ``score`` in [0, 1]. An id too long to be an entry's is left out."""
    if trace.success is not None:
        success = UNIT if trace.success else 0
    elif trace.score is not None and 0.0 <= trace.score <= 1.0:
        success = round(trace.score * UNIT)
    else:
        return None
    ids = sorted({entry_id for entry_id in used if 0 < len(entry_id) <= 128})
    return TraceOutcome(trace_id=trace.trace_id, ran_version=trace.playbook_version, success=success, used=ids)


def distinct_outcomes(outcomes: Iterable[TraceOutcome]) -> list[TraceOutcome]:
    """One outcome per trace (the copies of a trace carry the same one; the smallest wins should two differ),
    sorted by trace id."""
    found: dict[str, TraceOutcome] = {}
    for outcome in outcomes:
        seen = found.get(outcome.trace_id)
        if seen is None or outcome.model_dump_json() < seen.model_dump_json():
            found[outcome.trace_id] = outcome
    return [found[trace_id] for trace_id in sorted(found)]


def decayed(tally: OutcomeTally, decay: Fraction = DEFAULT_DECAY) -> OutcomeTally:
    """``tally`` one version older: each count times ``decay``, rounded down."""
    return OutcomeTally(successes=tally.successes * decay.numerator // decay.denominator,
                        failures=tally.failures * decay.numerator // decay.denominator)


def _plus(tally: OutcomeTally, successes: int, failures: int) -> OutcomeTally:
    return OutcomeTally(successes=tally.successes + successes, failures=tally.failures + failures)


def with_outcomes(playbook: Playbook, outcomes: Sequence[TraceOutcome],
                  decay: Fraction = DEFAULT_DECAY) -> Playbook:
    """``playbook`` with its baseline and its entries' counts decayed one version, then raised by ``outcomes``
    (distinct traces). Counts are not a change to an entry: ``updated_version`` stays."""
    added: dict[str, tuple[int, int]] = {}
    created = {entry.entry_id: entry.created_version for entry in playbook.entries}
    for outcome in outcomes:
        for entry_id in outcome.used:
            if created.get(entry_id, outcome.ran_version + 1) <= outcome.ran_version:
                s, f = added.get(entry_id, (0, 0))
                added[entry_id] = (s + outcome.success, f + UNIT - outcome.success)
    entries = []
    for entry in playbook.entries:
        tally = decayed(entry.outcome, decay)
        tally = _plus(tally, *added.get(entry.entry_id, (0, 0)))
        entries.append(entry if tally == entry.outcome else entry.model_copy(update={"outcome": tally}))
    baseline = _plus(decayed(playbook.baseline, decay), sum(o.success for o in outcomes),
                     sum(UNIT - o.success for o in outcomes))
    return replace(playbook, entries=tuple(entries), baseline=baseline)


def _beta(tally: OutcomeTally) -> tuple[Fraction, Fraction]:
    """Mean and variance of the Beta(1 + s, 1 + f) posterior of success (uniform prior)."""
    a = 1 + Fraction(tally.successes, UNIT)
    b = 1 + Fraction(tally.failures, UNIT)
    return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))


@dataclass(frozen=True)
class Credit:
    """An entry's outcome credit: the posterior of success when it was used against the baseline's."""

    uses: Fraction
    """Traces (decayed) whose agent used the entry."""
    rate: Fraction
    rate_variance: Fraction
    baseline: Fraction
    baseline_variance: Fraction

    @property
    def effect(self) -> Fraction:
        """Posterior mean success when used, less the baseline's."""
        return self.rate - self.baseline

    @property
    def sd(self) -> float:
        """Standard deviation of the effect (display only)."""
        return math.sqrt(self.rate_variance + self.baseline_variance)

    @property
    def excess(self) -> Fraction:
        """Successes above the baseline among its uses, in traces: ``uses x effect`` (what a restatement weighs
        against it; 0 when unused)."""
        return self.uses * self.effect

    def describe(self) -> str:
        """``+0.12 ± 0.08 over 14.3 uses (baseline 0.71)``, or ``unused``."""
        if not self.uses:
            return "unused"
        return (f"{float(self.effect):+.2f} ± {self.sd:.2f} over {float(self.uses):.1f} uses "
                f"(baseline {float(self.baseline):.2f})")


def credit(tally: OutcomeTally, baseline: OutcomeTally) -> Credit:
    """The outcome credit of an entry's ``tally`` against the playbook's ``baseline``."""
    rate, rate_variance = _beta(tally)
    base, base_variance = _beta(baseline)
    return Credit(uses=Fraction(tally.successes + tally.failures, UNIT), rate=rate, rate_variance=rate_variance,
                  baseline=base, baseline_variance=base_variance)


def outcomes_decide(a: PlaybookEntry, b: PlaybookEntry, min_uses: int = MIN_USES) -> PlaybookEntry | None:
    """The entry agents succeed with clearly more often, when each was used by at least ``min_uses`` traces and
    their success rates differ by more than :data:`DECISIVE_Z` standard deviations; else None (outcomes cannot
    tell them apart yet). Exact: compares squares of rationals."""
    rate_a, var_a = _beta(a.outcome)
    rate_b, var_b = _beta(b.outcome)
    if min(Fraction(e.outcome.successes + e.outcome.failures, UNIT) for e in (a, b)) < min_uses:
        return None
    difference = rate_a - rate_b
    if difference * difference <= DECISIVE_Z * DECISIVE_Z * (var_a + var_b):
        return None
    return a if difference > 0 else b


def worse_than_baseline(tally: OutcomeTally, baseline: OutcomeTally, min_uses: int = MIN_USES,
                        z: Fraction = Fraction(DEMOTION_Z)) -> Fraction | None:
    """How far below the baseline an entry's agents succeed, in squared standard deviations of the difference
    (``effect^2 / variance``, exact), when the entry was used by at least ``min_uses`` (decayed) traces and its
    posterior mean success is below the baseline's by more than ``z`` standard deviations; else None (not
    measurably worse). Exact: compares squares of rationals."""
    if Fraction(tally.successes + tally.failures, UNIT) < min_uses:
        return None
    rate, rate_variance = _beta(tally)
    base, base_variance = _beta(baseline)
    effect, variance = rate - base, rate_variance + base_variance
    if effect >= 0 or effect * effect <= z * z * variance:
        return None
    return effect * effect / variance
