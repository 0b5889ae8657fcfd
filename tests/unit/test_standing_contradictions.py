"""A rule and the rule the judge says contradicts it never both stay active (issue 38 item 2, and item 6's stand-ins):
a contradiction that comes to stand between two entries (a challenge's winner entering with a new wording, a
reducer's UPDATE or ADD) is settled by outcomes, else evidence, whatever the reducer call said."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from combee_core.models import AddOp, OutcomeTally, PlaybookEntry, UpdateOp
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.challenges import ChallengeRules
from combee_core.playbook.meaning import Judgement
from combee_core.playbook.opposites import Contradiction, settle, settled_pairs, standing_contradictions
from combee_core.playbook.outcomes import UNIT
from combee_core.playbook.uncertain import UncertainJudge
from tests.unit.playbook_support import PROPERTY

RULE = "Treat the final date of a file-path range as part of the range."
OPPOSITE = "File paths: treat the final date as outside the range."
OTHER = "Round only the final result."


class TableJudge:
    """Verdicts by table: pairs in ``conflict`` contradict, pairs in ``same`` are one lesson, others distinct."""

    def __init__(self, conflict: Sequence[tuple[str, str]], same: Sequence[tuple[str, str]] = ()) -> None:
        self.conflict = {frozenset(pair) for pair in conflict}
        self.same = {frozenset(pair) for pair in same}

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if frozenset((new, old)) in self.conflict:
            return Judgement("conflict", 0.9, "flipped: part vs outside")
        if new == old or frozenset((new, old)) in self.same:
            return Judgement("same", 0.7, "same meaning (0.70)")
        return Judgement("distinct", 0.1, "distinct")


JUDGE = TableJudge(conflict=[(RULE, OPPOSITE)])


def _entry(number: int, content: str, helpful: int = 0, uses: int = 0, successes: int = 0) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"dat-{number:05d}", section="dates", content=content, helpful=helpful,
                         created_version=1, updated_version=1,
                         outcome=OutcomeTally(successes=successes * UNIT, failures=(uses - successes) * UNIT))


def _strength(entry: PlaybookEntry) -> Fraction:
    return Fraction(entry.helpful)


def test_standing_contradictions_finds_the_pairs_with_a_fresh_side() -> None:
    entries = [_entry(1, RULE), _entry(2, OPPOSITE), _entry(3, OTHER)]
    [pair] = standing_contradictions(entries, JUDGE)
    assert (pair.first.entry_id, pair.second.entry_id) == ("dat-00001", "dat-00002")
    assert standing_contradictions(entries, JUDGE, fresh=lambda e: e.entry_id == "dat-00003") == []


def test_settle_goes_by_outcomes_when_both_were_used_enough_else_by_evidence() -> None:
    rule, opposite = _entry(1, RULE, helpful=2, uses=30, successes=28), _entry(2, OPPOSITE, helpful=9, uses=30,
                                                                             successes=10)
    won = settle(Contradiction(rule, opposite, "flip"), _strength, min_uses=10)
    assert won is not None and (won.winner, won.loser, won.by) == (rule, opposite, "outcomes")
    unused = _entry(1, RULE, helpful=2), _entry(2, OPPOSITE, helpful=9)
    won = settle(Contradiction(*unused, "flip"), _strength, min_uses=10)
    assert won is not None and (won.winner.entry_id, won.by) == ("dat-00002", "evidence")
    assert settle(Contradiction(_entry(1, RULE, 3), _entry(2, OPPOSITE, 3), "flip"), _strength, 10) is None


def test_a_reworded_entry_that_contradicts_another_is_settled_by_outcomes() -> None:
    """An UPDATE (what a reducer call may answer) rewords a used entry into the flip of a rule whose agents succeed
    clearly more often: the two never stand together; the rule holds, the other is superseded with both sides'
    evidence, and it counts against the change cap."""
    playbook = Playbook.from_entries("pb", 3, [_entry(1, RULE, helpful=1, uses=30, successes=28),
                                               _entry(2, OTHER, helpful=6, uses=30, successes=12)])
    result = apply_operations(playbook, [UpdateOp(entry_id="dat-00002", content=OPPOSITE)], 4, judge=JUDGE)
    assert [e.content for e in result.playbook.entries] == [RULE]
    [record] = result.superseded
    assert record.entry_id == "dat-00002" and "superseded by dat-00001 (outcomes decide): a standing " \
        "contradiction" in record.reason and "helpful 6" in record.reason
    assert set(result.changed) == {"dat-00002"}
    # the loser an unchanged entry: it counts against the cap, which keeps both when it is spent
    heavier = Playbook.from_entries("pb", 3, [_entry(1, RULE, uses=30, successes=12),
                                              _entry(2, OTHER, uses=30, successes=28)])
    capped = apply_operations(heavier, [UpdateOp(entry_id="dat-00002", content=OPPOSITE)], 4, judge=JUDGE,
                              max_changes=1)
    assert [e.content for e in capped.playbook.entries] == [RULE, OPPOSITE] and not capped.superseded
    uncapped = apply_operations(heavier, [UpdateOp(entry_id="dat-00002", content=OPPOSITE)], 4, judge=JUDGE,
                                max_changes=2)
    assert [e.content for e in uncapped.playbook.entries] == [OPPOSITE]


def test_restated_evidence_alone_does_not_settle_a_standing_pair() -> None:
    """Outcomes cannot tell them apart (unused): restatements do not decide a standing pair; both stay."""
    playbook = Playbook.from_entries("pb", 3, [_entry(1, RULE, helpful=6), _entry(2, OTHER, helpful=1)])
    result = apply_operations(playbook, [UpdateOp(entry_id="dat-00002", content=OPPOSITE)], 4, judge=JUDGE)
    assert len(result.playbook) == 2 and not result.superseded


def test_pairs_that_stood_before_the_version_are_left_to_the_adds_that_restate_them() -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry(1, RULE, helpful=6), _entry(2, OPPOSITE, helpful=1)])
    result = apply_operations(playbook, [AddOp(section="dates", content=OTHER)], 4, judge=JUDGE)
    assert len(result.playbook) == 3 and not result.superseded


def test_a_reducer_keep_apart_does_not_keep_a_contradiction() -> None:
    """The trusting judge turns an unconfirmed "same" the call kept apart into two lessons, never a conflict: an
    ADD of the opposite created beside the rule (one batch, more traces behind it) is settled at once."""
    judge = UncertainJudge.trusting(JUDGE, kept=frozenset({(OPPOSITE, RULE)}))
    playbook = Playbook.from_entries("pb", 3, [_entry(1, OTHER, helpful=1)])
    ops = [AddOp(section="dates", content=RULE, support=1), AddOp(section="dates", content=OPPOSITE, support=1)]
    result = apply_operations(playbook, ops, 4, judge=judge, rules=ChallengeRules(batch_traces=10))
    held = {e.content for e in result.playbook.entries}
    assert not {RULE, OPPOSITE} <= held


@st.composite
def contested(draw: st.DrawFn) -> tuple[Playbook, list[UpdateOp | AddOp]]:
    """A playbook of rules (some with their flip among the texts) and operations rewording or adding them."""
    texts = [f"rule {n} holds" for n in range(4)] + [f"rule {n} fails" for n in range(4)]
    chosen = draw(st.lists(st.sampled_from(texts), min_size=1, max_size=5, unique=True))
    entries = [_entry(n, text, helpful=draw(st.integers(0, 5)), uses=30, successes=draw(st.integers(0, 30)))
               for n, text in enumerate(chosen, 1)]
    ops: list[UpdateOp | AddOp] = draw(st.lists(st.one_of(
        st.builds(UpdateOp, entry_id=st.sampled_from([e.entry_id for e in entries]), content=st.sampled_from(texts)),
        st.builds(AddOp, section=st.just("dates"), content=st.sampled_from(texts))),
        max_size=6))
    return Playbook.from_entries("pb", 3, entries), ops


FLIPS = TableJudge(conflict=[(f"rule {n} holds", f"rule {n} fails") for n in range(4)])


@PROPERTY
@given(contested())
def test_no_new_contradiction_stands_where_outcomes_decide_it(
        case: tuple[Playbook, list[UpdateOp | AddOp]]) -> None:
    playbook, ops = case
    result = apply_operations(playbook, ops, 4, judge=FLIPS)
    before = {e.entry_id: e.content for e in playbook.entries}
    work = {e.entry_id: e for e in result.playbook.entries}
    rules = ChallengeRules()
    left = list(settled_pairs(work, FLIPS, rules.strength, rules.min_uses, lambda _: True, before))
    assert left == []  # every contradiction formed in the version that outcomes can decide was decided
