"""One word swapped in an otherwise identical frame (issue 38, "opposites the judge reads as one lesson"): "Open the
valve before heating the tank" / "Close the valve before heating the tank" differ in one verb, and a sentence
embedding puts them at 0.9 and more, so the judge folded the opposite into the rule and reinforced it. The two words
are close in meaning: antonyms or synonyms, which no embedding tells apart, and the conflict check has no axis for
them. Now such a pair is a conflict (a challenge, never a reinforcement); a swapped word the frame test reads as a
different subject stays two lessons, and a pair with more than one word changed is left to the other checks.

The pairs here are hand-written for this test (none is from a bench data set)."""

from __future__ import annotations

import asyncio
from functools import lru_cache

import pytest

from bench.naive_pipeline import reinforced
from combee_core.playbook.conflict import conflict_reason, one_word_swap
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import LexicalJudge, SemanticJudge
from tests.unit.embedders import minilm_embedder, naive_reducer

OPPOSITES = [
    ("Open the valve before heating the tank.", "Close the valve before heating the tank."),
    ("Widen the search radius when a query returns nothing.", "Narrow the search radius when a query returns nothing."),
    ("Expand the sidebar on wide screens.", "Collapse the sidebar on wide screens."),
    ("Cache the rendered page on the proxy for anonymous visitors.",
     "Cache the rendered page on the browser for anonymous visitors."),
    ("Shorten the polling interval when the queue grows.", "Lengthen the polling interval when the queue grows."),
    ("Sign release tags with the team key.", "Sign release tags with the personal key."),  # an adjunct swapped
    ("Reply to complaints on the public thread.", "Reply to complaints on the private thread."),
]
POLARITY = [  # a negation or a switch's value in one frame: the conflict check, for every judge
    ("Flush the buffer before closing the socket.", "Do not flush the buffer before closing the socket."),
    ("Always flush the buffer before closing the socket.", "Never flush the buffer before closing the socket."),
    ("Leave the debug flag off in production.", "Leave the debug flag on in production."),
    ("Serve the admin page from a non-public host.", "Serve the admin page from the public host."),
]


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("Open the valve first.", "Close the valve first.", ("open", "close")),
    ("Open the valve first.", "Open the valve first.", None),  # nothing swapped
    ("Open the valve first.", "Close the big valve first.", None),  # two changes
    ("Open the valve first.", "Open a valve first.", None),  # a function word
    ("Count the rows first.", "Total the rows first.", None),  # one step (the conflict check's synonyms)
    ("Cache pages.", "Cached pages.", None),  # one stem
    ("Retry 3 times.", "Retry 5 times.", None),  # numbers are the quantity check's
    ("Always open the valve.", "Never open the valve.", None),  # a negation is the conflict check's polarity
])
def test_one_word_swap_reads_exactly_one_content_word_in_place_of_another(a: str, b: str,
                                                                          expected: tuple[str, str] | None) -> None:
    swap = one_word_swap(a, b)
    assert (None if swap is None else (swap.old, swap.new)) == expected


@pytest.mark.parametrize(("a", "b", "in_object"), [
    ("Quote paths that contain spaces.", "Quote arguments that contain spaces.", True),
    ("Keep the original order of rows.", "Keep the original casing of rows.", True),
    ("Open the valve first.", "Close the valve first.", False),  # the verb
    ("Greet guests by their first name.", "Greet guests by their family name.", False),  # an adjunct
])
def test_a_swap_knows_whether_it_is_in_the_object(a: str, b: str, in_object: bool) -> None:
    swap = one_word_swap(a, b)
    assert swap is not None and swap.in_object is in_object


@pytest.mark.parametrize(("a", "b"), POLARITY)
def test_a_negation_or_a_switched_value_in_one_frame_is_a_conflict_for_every_judge(a: str, b: str) -> None:
    assert conflict_reason(a, b) is not None and conflict_reason(b, a) is not None
    assert LexicalJudge().judge(b, "rules", a, "rules").kind == "conflict"


@lru_cache(maxsize=1)
def _judge() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(minilm_embedder()))


@pytest.mark.parametrize(("a", "b"), OPPOSITES)
def test_a_one_word_opposite_in_one_frame_is_a_conflict(a: str, b: str) -> None:
    judge = _judge()
    judge.prepare([a, b])
    assert judge.score(a, b) >= judge.same_meaning  # the embedding alone calls them one lesson
    for new, old in ((b, a), (a, b)):
        verdict = judge.judge(new, "rules", old, "rules")
        assert verdict.kind == "conflict" and verdict.reason.startswith("one word swapped"), verdict


@pytest.mark.parametrize(("a", "b"), [
    ("Quote file names that contain spaces.", "Quote commit messages that contain spaces."),
    ("Escape user input before putting it into a shell command.",
     "Escape user input before putting it into a URL."),
])
def test_a_swapped_object_is_still_two_lessons(a: str, b: str) -> None:
    assert _judge().judge(b, "rules", a, "rules").kind == "distinct"


def test_through_the_reducer_a_one_word_opposite_never_reinforces_the_rule() -> None:
    a, b = OPPOSITES[3]  # reinforced and folded before: the other pairs' verbs superseded the rule as a rewording
    run = asyncio.run(reinforced(naive_reducer(), a, b))
    assert not run["reinforced"] and not run["folded"], run
