"""What a rule does its action with, when that is a named tool (``combee_core.playbook.instruments``): the parse and
the swap, pure (no model). The texts are hand-written for this test, none from ``bench/data``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.playbook.instruments import Tool, is_name, tool_swap, tools_of


def _words_alike(a: str, b: str) -> bool:
    return a == b


@pytest.mark.parametrize(("text", "expected"), [
    ("Sign session tokens with HS256.", [("sign session tokens", "session tokens", {"hs256"}, False)]),
    ("Encrypt nightly dumps using AES-256 or ChaCha20.",
     [("encrypt nightly dumps", "nightly dumps", {"aes-256", "chacha20"}, False)]),
    ("Session tokens should be signed via RS256 keys.",
     [("session tokens should be signed", "session tokens", {"rs256"}, False)]),  # passive: the thing comes first
    ("Never save exported reports as Latin-1 text.",
     [("save exported reports", "exported reports", {"latin-1"}, True)]),  # a prohibition rejects its tool
    ("Send webhook calls with a timeout.", []),  # a common word is no name
    ("Pick a hashing library such as PyNaCl.", []),  # "such as" gives an example, not an instrument
    ("Reply as soon as the build is green.", []),
    ("Run the job with 4 workers.", []),  # a bare number counts, it does not name
])
def test_the_named_tools_a_rule_does_its_action_with(text: str, expected: list[tuple[str, str, set[str], bool]]
                                                      ) -> None:
    assert [(t.action, t.thing, set(t.names), t.rejected) for t in tools_of(text)] == expected


def test_a_name_is_written_with_a_digit_or_an_inner_capital() -> None:
    assert [is_name(w) for w in ("MD5", "sha-256", "PostgreSQL", "JSON", "Monday", "timeout", "bcrypt")] == [
        True, True, True, True, False, False, False]


@pytest.mark.parametrize(("a", "b", "one"), [("utf-8", "utf8", True), ("argon2", "argon2id", True),
                                              ("sha-1", "sha1", True), ("aes-128", "aes-256", False)])
def test_one_name_spelt_two_ways_is_one_tool(a: str, b: str, one: bool) -> None:
    first, second = (Tool("encode exports", frozenset({name}), thing="exports") for name in (a, b))
    assert (tool_swap((first,), (second,), _words_alike) is None) == one


def test_a_swap_is_one_action_on_one_thing_with_no_tool_in_common() -> None:
    hs = Tool("sign tokens", frozenset({"hs256"}), thing="tokens")
    rs = Tool("sign tokens", frozenset({"rs256"}), thing="tokens")
    either = Tool("sign tokens", frozenset({"hs256", "rs256"}), thing="tokens")
    never_hs = Tool("sign tokens", frozenset({"hs256"}), rejected=True, thing="tokens")
    other_thing = Tool("sign tokens", frozenset({"rs256"}), thing="cookies")
    assert tool_swap((hs,), (rs,), _words_alike) is not None
    assert tool_swap((hs,), (never_hs,), _words_alike) is not None  # asked by one, rejected by the other
    assert tool_swap((hs,), (either,), _words_alike) is None  # a tool in common: one lesson
    assert tool_swap((rs,), (never_hs,), _words_alike) is None  # "sign with RS256" / "never with HS256" agree
    assert tool_swap((hs,), (other_thing,), _words_alike) is None  # another thing: another lesson


_TEXT = st.lists(st.sampled_from(["Sign", "tokens", "with", "using", "as", "HS256", "RS256", "never", "or", "the",
                                  "such", ",", ";", "must", "be", "signed", "keys"]), max_size=12).map(" ".join)


@given(_TEXT, _TEXT)
@settings(max_examples=200, deadline=None)
def test_a_swap_is_symmetric_and_no_text_swaps_against_itself(a: str, b: str) -> None:
    ta, tb = tools_of(a), tools_of(b)
    assert (tool_swap(ta, tb, _words_alike) is None) == (tool_swap(tb, ta, _words_alike) is None)
    assert tool_swap(ta, ta, _words_alike) is None or any(t.rejected for t in ta)
