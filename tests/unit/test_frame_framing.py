"""The frame tests (``SemanticJudge._swapped`` / ``_moved_frame``) set two texts apart only on a part that can name a
subject. Two slips kept one lesson in two entries (every reducer stand-in and the judge alone, issue 38):

- the words that frame a scope ("the question is about" / "a task involves" / "how ... are"), left over when two
  wordings frame one scope differently, were compared as two subjects ("question about" vs "task involves");
- a scope both texts state in the same words counted towards the shared frame, so two wordings of one action
  under it ("count the end date as included" / "treat the last date as part of the span") read as one frame with
  their verbs swapped. Now the frame tests read what each says to do there alone (``meaning._actions``).

A framing word inside a scope's name is part of the name ("upper case", "support requests"): only a leading
frame is dropped, in the scope test and in the frame tests alike (before, "letter case" was compared as "letter").

A swapped part that names something (another noun, another verb in an action that is a frame by itself) still sets
the texts apart. Every wording here is this test's own (parcels, invoices, ledgers), written for it; none is from
the simulator's registry or a held-out set."""

from __future__ import annotations

import pytest

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.scope import scope_of

ONE_LESSON = [
    # one scope, framed differently: only framing words differ
    ("If the question is about parcel weights, convert pounds to kilograms first.",
     "When a task involves parcel weights, convert pounds to kilograms first."),
    ("Rounding invoice totals: add the tax before rounding.",
     "How invoice totals are rounded: add the tax before rounding."),
    # a framing word inside a scope's name is part of it ("upper case" is not "upper")
    ("For upper case, strip accents before comparing names.",
     "Strip accents before comparing names in tasks about capital letters."),
    # one scope in the same words, one action in other words
    ("Renewing a parcel locker rental: count the start day as paid.",
     "Renewing a parcel locker rental: treat the first day as part of the rental."),
    ("If the question is about ledger exports, exclude blank amounts instead of counting them as zero.",
     "If the question is about ledger exports, treat a blank amount as unknown, not zero."),
    ("When a task involves overdue invoices, exclude unpaid fees instead of adding them to the total.",
     "When a task involves overdue invoices, leave unpaid fees out of the total."),
]
TWO_LESSONS = [
    # one scope in the same words, one part of the action swapped for another thing or another act
    ("Ledger exports: count the header row.", "Ledger exports: skip the header row."),
    ("When a task involves parcel weights, quote file paths that contain spaces.",
     "When a task involves parcel weights, quote shell arguments that contain spaces."),
    # two scopes in one frame
    ("For parcel weights, round up to the next gram.", "For invoice totals, round up to the next gram."),
]


@pytest.mark.parametrize(("text", "words"), [
    ("For upper case, strip accents before comparing names.", ("upper", "case")),
    ("Support requests: reply in the customer's language.", ("support", "requests")),
    ("When a task involves parcel weights, convert pounds first.", ("parcel", "weights")),
    ("Reply in the customer's language in tasks about help desk tickets.", ("help", "desk", "tickets")),
])
def test_a_scope_is_named_by_its_words_after_its_frame(text: str, words: tuple[str, ...]) -> None:
    scope = scope_of(text)
    assert scope is not None and scope.words == words


@pytest.fixture(scope="module")
def judge() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(MiniLMEmbedder()))


@pytest.mark.parametrize(("a", "b"), ONE_LESSON)
def test_one_lesson_worded_or_framed_differently_is_one_lesson(judge: SemanticJudge, a: str, b: str) -> None:
    judge.prepare([a, b])
    for new, old in ((a, b), (b, a)):
        verdict = judge.judge(new, "general", old, "general")
        assert verdict.kind == "same", verdict


@pytest.mark.parametrize(("a", "b"), TWO_LESSONS)
def test_a_swapped_subject_or_act_still_sets_two_lessons_apart(judge: SemanticJudge, a: str, b: str) -> None:
    judge.prepare([a, b])
    for new, old in ((a, b), (b, a)):
        assert judge.judge(new, "general", old, "general").kind != "same"


def test_a_rewording_under_one_scope_reinforces_the_entry_instead_of_adding_one(judge: SemanticJudge) -> None:
    entry = PlaybookEntry(entry_id="gen-00001", section="general", content=ONE_LESSON[2][0], helpful=3,
                          created_version=1, updated_version=1)
    result = apply_operations(Playbook.from_entries("pb", 1, [entry]),
                              [AddOp(section="general", content=ONE_LESSON[2][1], support=2)], 2, judge=judge)
    assert [e.entry_id for e in result.playbook.entries] == ["gen-00001"]
    kept = result.playbook.get("gen-00001")
    assert kept is not None and kept.helpful == 5
