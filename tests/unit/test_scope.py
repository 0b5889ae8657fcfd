"""One rule stated for two scopes is two lessons; a rewording of one scoped rule is one; a flip is still a conflict
(issue 38: a judge that folded "For X, treat an empty cell as missing" into the same rule for Y lost Y's rule).
Hand-written texts (not the simulator's wordings, not the held-out sets), under the default offline encoder."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.scope import scope_of


@lru_cache(maxsize=1)
def _judge() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(MiniLMEmbedder()))


@pytest.mark.parametrize(("text", "words"), [
    ("For CSV exports, treat an empty cell as missing.", ("csv", "exports")),
    ("When a task involves shipping fees, round up to the cent.", ("shipping", "fees")),
    ("If the question is about payroll, use the gross amount.", ("payroll",)),
    ("Use the gross amount in tasks about payroll.", ("payroll",)),
    ("Refund requests: check the order date first.", ("refund",)),
    ("Treat an empty cell as missing.", None),  # states no scope
    ("Check the order date first, then decide.", None),  # a leading verb phrase is not a scope
])
def test_the_scope_a_rule_states_is_read_from_its_sentence(text: str, words: tuple[str, ...] | None) -> None:
    scope = scope_of(text)
    if words is None:
        assert scope is None
    else:
        assert scope is not None and set(words) <= set(scope.words)


SIBLINGS = [
    ("For CSV exports, treat an empty cell as missing, not zero.",
     "For the payroll report, treat an empty cell as missing, not zero."),
    ("When a task involves shipping fees, round the result up to the next cent.",
     "When a task involves loan interest, round the result up to the next cent."),
    ("Convert every amount to euros first in tasks about hotel bookings.",
     "If the question is about stock dividends, convert every amount to euros first."),
]


@pytest.mark.parametrize(("a", "b"), SIBLINGS)
def test_one_rule_stated_for_two_scopes_is_two_lessons(a: str, b: str) -> None:
    judge = _judge()
    judge.prepare([a, b])
    assert judge.score(a, b) >= judge.same_meaning  # close by the cosine: the scope test keeps them apart
    for new, old in ((a, b), (b, a)):
        verdict = judge.judge(new, "x", old, "x")
        assert verdict.kind == "distinct" and "another scope" in verdict.reason
    assert judge.judge_group(a, "x", [b]).kind == "distinct"


PARAPHRASES = [  # one lesson reworded: the scope reworded too, or stated once
    ("For CSV exports, treat an empty cell as missing, not zero.",
     "When a task involves exporting CSV files, a blank cell means no data rather than 0."),
    ("When a task involves shipping fees, round the result up to the next cent.",
     "For shipping charges, always round the result up to the next cent."),
    ("Only retry a request automatically when the operation is idempotent.",
     "Retry a failed request automatically only if the operation is idempotent."),
]


@pytest.mark.parametrize(("a", "b"), PARAPHRASES)
def test_a_rewording_of_one_scoped_rule_is_one_lesson(a: str, b: str) -> None:
    judge = _judge()
    judge.prepare([a, b])
    assert judge.judge(a, "x", b, "x").kind == "same"
    assert judge.judge(b, "x", a, "x").kind == "same"


def test_a_flip_within_one_scope_is_still_a_conflict_and_supersedes_when_it_outweighs() -> None:
    rule = "For CSV exports, treat an empty cell as missing, not zero."
    flip = "For CSV exports, treat an empty cell as zero."
    judge = _judge()
    judge.prepare([rule, flip])
    assert judge.judge(flip, "x", rule, "x").kind == "conflict"
    entry = PlaybookEntry(entry_id="csv-00001", section="csv", content=rule, helpful=1, created_version=1,
                          updated_version=1)
    result = apply_operations(Playbook.from_entries("pb", 1, [entry]), [AddOp(section="csv", content=flip,
                                                                             support=5)], 2, judge=judge)
    assert [e.content for e in result.playbook.entries] == [flip]  # superseded, not folded or kept beside it


def test_a_rule_for_another_scope_is_added_beside_the_entry_and_raises_none_of_its_counters() -> None:
    a, b = SIBLINGS[0]
    entry = PlaybookEntry(entry_id="csv-00001", section="csv", content=a, helpful=3, created_version=1,
                          updated_version=1)
    result = apply_operations(Playbook.from_entries("pb", 1, [entry]), [AddOp(section="csv", content=b, support=4)],
                              2, judge=_judge())
    assert sorted(e.content for e in result.playbook.entries) == sorted([a, b])
    kept = result.playbook.get("csv-00001")
    assert kept is not None and (kept.helpful, kept.harmful) == (3, 0)


_SCOPES = ["CSV exports", "the payroll report", "shipping fees", "loan interest", "hotel bookings", "time sheets",
           "stock dividends", "recipe portions"]
"""Scopes MiniLM sets apart (every pair below 0.35). Not every pair a user would call unrelated is: "the payroll
report" and "customer invoices" score 0.36, so one action for both is judged one lesson (a known miss of the scope
test, docs/benchmarks.md)."""
_FORMS = ["For {s}, {a}.", "When a task involves {s}, {a}.", "If the question is about {s}, {a}.",
          "{A} in tasks about {s}."]
_ACTIONS = ["treat an empty cell as missing, not zero", "round the result up to the next cent",
            "convert every amount to euros first"]


@settings(max_examples=40, deadline=None)
@given(scopes=st.lists(st.sampled_from(_SCOPES), min_size=2, max_size=2, unique=True),
       forms=st.tuples(st.sampled_from(_FORMS), st.sampled_from(_FORMS)), action=st.sampled_from(_ACTIONS))
def test_one_action_for_two_unrelated_scopes_is_never_one_lesson(scopes: list[str], forms: tuple[str, str],
                                                                 action: str) -> None:
    a, b = (form.format(s=s, a=action, A=action[:1].upper() + action[1:]) for form, s in zip(forms, scopes))
    judge = _judge()
    judge.prepare([a, b])
    assert judge.judge(a, "x", b, "x").kind != "same"
