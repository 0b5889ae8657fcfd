"""What a rule requires to be there or not there: "needs a time limit" (present), "without a timeout" (absent).

A correction often says the opposite of a rule in other words: "Call external services without a timeout" and "Every
request to a remote API needs a time limit" share no content word, and a sentence embedding places them no closer
than two different lessons on one topic, so neither the judge's threshold nor the word-level conflict check
(:mod:`~combee_core.playbook.conflict`) sees them flip. What does flip is the requirement: one text says a thing must
be absent, the other that a thing must be present, and the two things are one thing said in other words.

:func:`requirements_of` reads, per clause, the thing after a marker of absence ("without X", "no X", "skip X",
"omit X", "leave out X", "forgo X", or a verb of presence negated: "never set X", "do not add X") or of presence
("needs X", "requires X", "set X", "add X", "include X", "with X", ...; a verb of presence in a negated clause asks
nothing, nor one right after a relative pronoun: "amounts that already include tax" describes); a marker of absence in
a negated clause ("do not call it without a timeout") asks for presence, and a clause opening with "without" is a
condition ("Without a retry budget, a job loops for ever") that asks for nothing. The thing is
the words after the marker (determiners skipped, at most :data:`MAX_THING_WORDS`, up to the first function word).

:func:`requirement_flip` compares two texts' requirements with a similarity of things supplied by the caller (the
judge's embedding): a flip is one text's absent thing being the other's present thing (similarity at least the
caller's floor) while neither text also states the other's polarity for that thing ("Do not X without Y; Y is
optional" is not compared so). Pure and deterministic; no model here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from combee_core.playbook.conflict import split_clauses

Polarity = Literal["present", "absent"]

MAX_THING_WORDS = 3
"""Words kept of the thing after a marker ("a short textual description for ..." -> "short textual description"):
a noun phrase's head and two modifiers; the rest of a clause says where or why, not what."""

_NEGATED = re.compile(r"\b(not|never|don't|dont|cannot|can't|mustn't|shouldn't|nor|no need)\b")
_PRESENCE_VERBS = ("need|needs|require|requires|set|add|give|pass|include|includes|use|carry|carries|attach|provide|"
                   "specify|enforce|apply|put|keep|have|has|with")
_PRESENT = re.compile(rf"\b({_PRESENCE_VERBS})\s+(.*)")
_NEGATED_PRESENT = re.compile(rf"\b(never|not|don't|dont|avoid|no need to)\s+(?:\w+ly\s+)?({_PRESENCE_VERBS})\s+(.*)")
_ABSENT = re.compile(r"\b(without|skip|skipping|omit|omitting|forgo|forgoing|leave out|leaving out|no)\s+(.*)")
_CONDITION = re.compile(r"^(?:and |but |so |or )?without\b")
"""A clause that opens with "without" states a condition and its consequence follows ("Without a retry budget, a
failing job loops for ever"): it argues for the thing, it does not ask for its absence."""
_DESCRIBED = re.compile(rf"\b(that|which|who)\s+(?:already\s+|also\s+|\w+ly\s+)?({_PRESENCE_VERBS})\b")
"""A verb of presence right after a relative pronoun describes a thing ("net amounts that already include tax"),
it does not ask for one."""
_NOT_A_THING = re.compile(r"(more|less|fewer|later|earlier|longer|matter|one|need|out|no|without)\b")
"""Words after "no" / "with" that are not a thing ("no more than", "no matter", "with no", "with out")."""
_DETERMINERS = frozenset("a an the any every each some all its their your our this that these those".split())
_FUNCTION_WORDS = frozenset(
    "to for on in of or and so as at by with without from into than when whenever before after until unless if while"
    " because since then but is are be been must should can could will would may might which who whose that it them"
    " they he she we you".split())
_TOKEN = re.compile(r"[a-z0-9][a-z0-9'=_.-]*|[,;:.!?()]")


@dataclass(frozen=True, slots=True)
class Requirement:
    polarity: Polarity
    thing: str


def requirements_of(text: str) -> tuple[Requirement, ...]:
    """The things ``text`` requires present or absent, clause by clause, in order, without repeats."""
    found: list[Requirement] = []
    for clause in split_clauses(text.lower().replace("\u2019", "'")):
        if _CONDITION.match(clause):
            continue
        negated = _NEGATED.search(clause) is not None
        described = {match.start(2) for match in _DESCRIBED.finditer(clause)}
        for match in _NEGATED_PRESENT.finditer(clause):
            _note(found, "absent", match.group(3))
        for match in _ABSENT.finditer(clause):
            if match.group(1) == "no" and _NOT_A_THING.match(match.group(2)):
                continue
            double = _NEGATED.search(clause[:match.start()]) is not None  # "never call it without a timeout"
            _note(found, "present" if double else "absent", match.group(2))
        if not negated:
            for match in _PRESENT.finditer(clause):
                if match.start() not in described and not _NOT_A_THING.match(match.group(2)):
                    _note(found, "present", match.group(2))
    return tuple(found)


def _note(found: list[Requirement], polarity: Polarity, rest: str) -> None:
    words: list[str] = []
    for token in _TOKEN.findall(rest):
        if token in ",;:.!?()" or token in _FUNCTION_WORDS:
            break
        if not words and token in _DETERMINERS:
            continue
        words.append(token.rstrip("."))
        if len(words) == MAX_THING_WORDS:
            break
    requirement = Requirement(polarity, " ".join(words))
    if words and requirement not in found:
        found.append(requirement)


def requirement_flip(a: tuple[Requirement, ...], b: tuple[Requirement, ...],
                     alike: Callable[[str, str], bool]) -> str | None:
    """Why ``a`` and ``b`` require one thing with opposite polarity (``alike`` says two things are one), or None."""
    for mine in a:
        for theirs in b:
            if mine.polarity == theirs.polarity or not alike(mine.thing, theirs.thing):
                continue
            if any(own.polarity == theirs.polarity and alike(own.thing, theirs.thing) for own in a) or any(
                    other.polarity == mine.polarity and alike(other.thing, mine.thing) for other in b):
                continue  # one of them states both polarities of the thing: not a flip of it
            return f"requirement: {mine.thing!r} {mine.polarity} vs {theirs.thing!r} {theirs.polarity}"
    return None
