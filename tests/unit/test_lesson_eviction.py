"""Eviction never takes a lesson's last entry while an entry another restates could go (issue 38 item 4 and item 6's
stand-ins: a family's only rule was evicted by the budget while another lesson was held twice)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from combee_core.models import OutcomeTally, PartialUpdate, PlaybookEntry, Usage
from combee_core.playbook import Playbook, playbook_tokens
from combee_core.playbook.eviction import is_spare, last_of_lesson, restated_by
from combee_core.playbook.meaning import Judgement
from combee_core.playbook.outcomes import UNIT
from combee_core.reduce.budget import fit_to_budget
from combee_core.reduce.reduction import ScanResult, build_version
from tests.unit.playbook_support import PROPERTY

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
ONLY = "Count the end date of a leap-year range as included."
TWICE = "Give percentages rounded to two decimal places."
TWICE_AGAIN = "Round every percentage to two decimals."
OPPOSITE = "Count the end date of a leap-year range as excluded."


class TableJudge:
    """Verdicts by table: pairs in ``same`` are one lesson (either way round), pairs in ``conflict`` contradict."""

    def __init__(self, same: Sequence[tuple[str, str]], conflict: Sequence[tuple[str, str]] = ()) -> None:
        self.same = {frozenset(pair) for pair in same}
        self.conflict = {frozenset(pair) for pair in conflict}

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old or frozenset((new, old)) in self.same:
            return Judgement("same", 0.8, "same meaning")
        if frozenset((new, old)) in self.conflict:
            return Judgement("conflict", 0.9, "flipped")
        return Judgement("distinct", 0.1, "distinct")


def _entry(number: int, content: str, *, uses: int = 0, successes: int = 0, v: int = 1) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"gen-{number:05d}", section="general", content=content, created_version=v,
                         updated_version=v, outcome=OutcomeTally(successes=successes * UNIT,
                                                                 failures=(uses - successes) * UNIT))


def _playbook() -> Playbook:
    """The only wording of one lesson, worth least by outcomes (its agents at the baseline, the other two above),
    beside two wordings of another lesson."""
    return Playbook.from_entries("pb", 3, [_entry(1, ONLY, uses=20, successes=16), _entry(2, TWICE, uses=20,
                                                                                        successes=19),
                                           _entry(3, TWICE_AGAIN, uses=20, successes=18)],
                                 baseline=OutcomeTally(successes=80 * UNIT, failures=20 * UNIT))


def _one_less(playbook: Playbook) -> int:
    """A budget one entry (the longest) over."""
    return playbook_tokens(playbook) - 1


def test_restated_by_pairs_the_entries_the_judge_calls_one_lesson() -> None:
    judge = TableJudge(same=[(TWICE, TWICE_AGAIN)], conflict=[(ONLY, OPPOSITE)])
    entries = [*_playbook().entries, _entry(4, OPPOSITE)]
    restated = restated_by(entries, judge)
    assert restated == {"gen-00001": frozenset(), "gen-00002": frozenset({"gen-00003"}),
                        "gen-00003": frozenset({"gen-00002"}), "gen-00004": frozenset()}  # a conflict: two lessons
    assert is_spare("gen-00002", {"gen-00002", "gen-00003"}, restated)
    assert not is_spare("gen-00002", {"gen-00002"}, restated)  # the other wording has gone: the lesson's last
    assert last_of_lesson(["gen-00001", "gen-00002", "gen-00003"], restated) == ["gen-00001"]


def test_restatement_is_not_chained() -> None:
    """A restating B and B restating C: once B has gone, A and C are each their lesson's last."""
    a, b, c = "a one", "b two", "c three"
    restated = restated_by([_entry(1, a), _entry(2, b), _entry(3, c)], TableJudge(same=[(a, b), (b, c)]))
    assert last_of_lesson(["gen-00001", "gen-00003"], restated) == ["gen-00001", "gen-00003"]


def test_a_lesson_held_twice_goes_before_a_lessons_only_entry() -> None:
    playbook = _playbook()
    judge = TableJudge(same=[(TWICE, TWICE_AGAIN)])
    ranked_alone = fit_to_budget(playbook, _one_less(playbook))
    assert [a.entry_id for a in ranked_alone.evictions] == ["gen-00001"]  # the ranking alone loses the lesson
    fitted = fit_to_budget(playbook, _one_less(playbook), judge=judge)
    assert [a.entry_id for a in fitted.evictions] == ["gen-00003"]  # the lower-valued of the two wordings
    assert "another entry states its lesson" in fitted.evictions[0].reason
    assert [e.entry_id for e in fitted.playbook.entries] == ["gen-00001", "gen-00002"]


def test_a_lessons_last_entry_goes_when_nothing_else_can() -> None:
    playbook = _playbook()
    judge = TableJudge(same=[(TWICE, TWICE_AGAIN)])
    fitted = fit_to_budget(playbook, playbook_tokens(Playbook.from_entries("pb", 3, [_entry(1, ONLY)])), judge=judge)
    assert [a.entry_id for a in fitted.evictions] == ["gen-00003", "gen-00001"]  # then the ranking decides
    assert "no entry that another restates could go" in fitted.evictions[1].reason
    assert not fitted.over_budget


def test_the_caps_still_bind_the_spare_entries() -> None:
    """A spare entry the change cap keeps is skipped (blocked), and the ranking goes on to the lessons' last."""
    playbook = _playbook()
    fitted = fit_to_budget(playbook, _one_less(playbook), existing=["gen-00002", "gen-00003"], allowance=0,
                           judge=TableJudge(same=[(TWICE, TWICE_AGAIN)]))
    assert fitted.blocked == ["gen-00003", "gen-00002"]
    assert [a.entry_id for a in fitted.evictions] == ["gen-00001"]


def test_build_version_evicts_by_lesson_with_its_judge() -> None:
    playbook = _playbook()
    partial = PartialUpdate(playbook_id="pb", batch_id=3, node=0, k=1, base_version=3, operations=[], items_read=1,
                            expected_items=1, batch_closed_at=NOW, model="m")
    scan = ScanResult(operations=[], usage=Usage(), levels=0, critical_path_s=0.0)
    built = build_version(playbook, [partial], scan, published_at=NOW, budget_tokens=_one_less(playbook),
                          change_share=None, judge=TableJudge(same=[(TWICE, TWICE_AGAIN)]))
    assert [e.content for e in built.record.entries] == [ONLY, TWICE]


@st.composite
def lesson_playbooks(draw: st.DrawFn) -> tuple[Playbook, TableJudge, int]:
    """Entries of 1-4 lessons (each 1-3 wordings), random outcomes, and a budget some entries over."""
    lessons = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    entries: list[PlaybookEntry] = []
    same: list[tuple[str, str]] = []
    for lesson, wordings in enumerate(lessons):
        texts = [f"lesson {lesson} wording {n} " + "word " * draw(st.integers(0, 8)) for n in range(wordings)]
        same += [(a, b) for n, a in enumerate(texts) for b in texts[n + 1:]]
        for text in texts:
            uses = draw(st.integers(0, 30))
            entries.append(_entry(len(entries) + 1, text, uses=uses, successes=draw(st.integers(0, uses)),
                                  v=draw(st.integers(1, 3))))
    playbook = Playbook.from_entries("pb", 3, entries, baseline=OutcomeTally(successes=70 * UNIT,
                                                                             failures=30 * UNIT))
    budget = draw(st.integers(0, playbook_tokens(playbook)))
    return playbook, TableJudge(same=same), budget


@PROPERTY
@given(lesson_playbooks())
def test_eviction_never_takes_a_lessons_last_entry_while_a_restated_one_could_go(
        case: tuple[Playbook, TableJudge, int]) -> None:
    playbook, judge, budget = case
    restated = restated_by(playbook.entries, judge)
    fitted = fit_to_budget(playbook, budget, judge=judge)
    kept = set(playbook.entry_ids)
    for eviction in fitted.evictions:
        victim = str(eviction.entry_id)
        if not is_spare(victim, kept, restated):
            assert not any(is_spare(other, kept, restated) for other in kept), (victim, sorted(kept))
        kept.discard(victim)
    # the order changes which entries go, never whether the version fits
    assert fitted.over_budget == fit_to_budget(playbook, budget).over_budget
    assert len(fitted.evictions) <= len(fit_to_budget(playbook, budget).evictions) + len(playbook) // 2
