"""Within one batch, a rule and its correction are settled by the distinct traces behind each side, not by which one
is applied first (``combee_core.playbook.working_playbook``: an entry a version's ADD created counts that ADD's traces
against a contradiction in the same version)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.challenges import ChallengeRules

RULE = "Apply the discount after computing tax on invoice totals."
CORRECTION = "Apply the discount before computing tax on invoice totals."
BATCH_TRACES = 100


def _apply(playbook: Playbook, *adds: tuple[str, int]) -> tuple[Playbook, list[str]]:
    """``adds`` ((text, distinct traces) each) applied in order as one version of a batch of 100 traces."""
    ops = [AddOp(section="invoices", content=text, support=support) for text, support in adds]
    result = apply_operations(playbook, ops, playbook.version + 1, rules=ChallengeRules(batch_traces=BATCH_TRACES))
    return result.playbook, [f"{a.outcome}: {a.reason}" for a in result.applied]


def test_the_side_more_traces_of_the_batch_state_stays_though_it_was_applied_first() -> None:
    playbook, reasons = _apply(Playbook.empty("pb"), (RULE, 5), (CORRECTION, 2))
    assert [e.content for e in playbook.entries] == [RULE]
    assert reasons[1].startswith("rejected: conflicts with")
    assert "created in this version by 5 distinct traces: evidence 5" in reasons[1]
    assert [(c.content, c.support) for c in playbook.challenges] == [(CORRECTION, 2)]  # pending, not lost


def test_the_side_more_traces_of_the_batch_state_wins_though_it_was_applied_second() -> None:
    playbook, reasons = _apply(Playbook.empty("pb"), (CORRECTION, 2), (RULE, 5))
    assert [(e.content, e.helpful) for e in playbook.entries] == [(RULE, 4)]  # it inherits the evidence it won with
    assert reasons[1].startswith("applied: added; supersedes")


def test_an_entry_of_an_earlier_version_counts_its_creation_once() -> None:
    """The traces that created an entry count only within their own version: across versions the entry's evidence
    is its restatements (``entry_evidence``) plus outcome credit, as before."""
    earlier = PlaybookEntry(entry_id="inv-00001", section="invoices", content=RULE, created_version=1,
                            updated_version=1)
    playbook = Playbook(playbook_id="pb", version=1, entries=(earlier,), next_entry_number=2)
    playbook, _ = _apply(playbook, (CORRECTION, 2))
    assert [e.content for e in playbook.entries] == [CORRECTION]


@settings(max_examples=60, deadline=None)
@given(rule=st.integers(1, 40), correction=st.integers(1, 40), rule_first=st.booleans())
def test_within_a_batch_the_majority_of_traces_decides_whatever_the_order(rule: int, correction: int,
                                                                           rule_first: bool) -> None:
    adds = [(RULE, rule), (CORRECTION, correction)]
    playbook, _ = _apply(Playbook.empty("pb"), *(adds if rule_first else adds[::-1]))
    first = RULE if rule_first else CORRECTION
    expected = RULE if rule > correction else CORRECTION if correction > rule else first  # a tie keeps the first
    assert [e.content for e in playbook.entries] == [expected]
    kept = rule if expected == RULE else correction
    assert len(playbook.challenges) == (0 if expected != first else 1)  # the loser's side is pending when it lost
    if expected != first:  # a superseding side inherits the evidence it won with, never more
        assert playbook.entries[0].helpful == kept - 1
