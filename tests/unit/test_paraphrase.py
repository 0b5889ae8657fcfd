"""Paraphrase consolidation: an ADD restating an entry in other words reinforces it instead of adding a second."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations, is_paraphrase


def held(content: str, helpful: int = 2) -> Playbook:
    return Playbook.from_entries("pb", 3, [PlaybookEntry(entry_id="dat-00001", section="dates", content=content,
                                                         helpful=helpful, created_version=1, updated_version=1)])


def test_a_reworded_lesson_reinforces_its_entry_with_the_support_summed():
    playbook = held("Count the end date as included when measuring a date range.")
    reworded = AddOp(section="dates", support=3,
                     content="When measuring a date range, include the end date in the count.")
    result = apply_operations(playbook, [reworded], 4)
    assert [e.entry_id for e in result.playbook.entries] == ["dat-00001"]
    assert result.playbook.entries[0].helpful == 5
    assert result.applied[0].reason == "paraphrase of dat-00001"
    # ...only within its section, and only when asked to.
    other = apply_operations(playbook, [AddOp(section="units", content="Include the end date in the count when "
                                              "measuring a date range.")], 4)
    assert len(other.playbook) == 2
    off = apply_operations(playbook, [AddOp(section="dates", content="When measuring a date range, include the end "
                                            "date in the count.")], 4, paraphrases=False)
    assert len(off.playbook) == 2


def test_opposite_or_different_lessons_are_not_paraphrases():
    assert not is_paraphrase("Apply the discount before adding the tax.", "Apply the discount after adding the tax.")
    assert not is_paraphrase("Treat an empty cell as missing, not zero.", "Treat an empty cell as missing and zero.")
    assert not is_paraphrase("For leap years (R08), count the end date.", "For leap years (R09), count the end date.")


words = st.lists(st.sampled_from(["count", "end", "date", "range", "include", "sort", "tax", "rows", "page"]),
                 min_size=3, max_size=10).map(" ".join)


@given(words, st.integers(0, 99), st.integers(0, 99))
def test_property_lessons_naming_different_numbers_or_ids_are_never_merged(text, a, b):
    if a != b:
        assert not is_paraphrase(f"For rule R{a:02d}: {text}.", f"For rule R{b:02d}: {text}.")
    assert is_paraphrase(f"For rule R{a:02d}: {text} first.", f"First, {text} for rule R{a:02d}.") or len(
        set(text.split())) < 3
