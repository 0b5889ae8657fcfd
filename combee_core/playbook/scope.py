"""What a lesson is *about*: the scope a rule is stated for ("For invoice totals, ...", "When the input is a CSV
file, ...", "... in tasks about time zones", "Refunds: ..."), read from the sentence alone.

A sentence embedding averages a rule's words, so one action stated for two scopes ("For negative numbers, treat an
empty cell as missing" / "For retry limits, treat an empty cell as missing") comes out close, and a judge would fold
one rule into the other: the second scope loses its rule. Two lessons whose scopes both are stated and differ in
meaning are two lessons, whatever the rest says (:class:`~combee_core.playbook.meaning.SemanticJudge` checks this
before it consolidates anything). A lesson that states no scope, or only one of the two, is left to the other checks:
a scope cannot differ from one that is not there.

The forms are general English (a leading "for / when / whenever / if / in / during / with / while" clause ended by a
comma, a trailing "in tasks / cases / questions about ..." or "for / when / if ..." of at most :data:`TRAILING_MAX`
content words after a verb phrase, a short leading label ended by a colon), not a list of any data set's sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from combee_core.playbook.similarity import _STOPWORDS

LABEL_MAX = 8
"""Words a leading label ("Refunds over 30 days: ...") may have (at most :data:`TRAILING_MAX` content words) to read
as the rule's scope."""
TRAILING_MAX = 6
"""Content words a trailing scope phrase may have ("... in tasks about leap years")."""

_LEADING = re.compile(r"^\s*(?:for|when|whenever|if|in|on|during|with|while|within)\s+(?P<scope>[^,;:]+?)\s*,\s*\S",
                      re.IGNORECASE)
_TRAILING = re.compile(r"\s(?:in|for)\s+(?:any\s+|all\s+)?(?:tasks?|questions?|cases?|problems?|requests?|queries)"
                       r"\s+(?:about|on|involving|with|that\s+involve|concerning|of)\s+(?P<scope>[^,;:]+?)\s*[.!]?\s*$",
                       re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?P<scope>[^,;:.]+?)\s*:\s+\S")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
FRAMING = frozenset(
    "task tasks question questions problem problems case cases request requests query queries involve involves"
    " involving involved about concerning concerns deal deals dealing work works working handle handles handling"
    " asked asks ask given there how".split())
"""Words that frame a scope ("when a task involves X", "if the question is about X", "how X is done: ...") rather
than name it; what a rule is about is never one of them (the frame tests of ``meaning`` skip them too)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The scope a lesson states: its phrase as written and its content words (its leading frame dropped)."""

    phrase: str
    words: tuple[str, ...]

    @property
    def text(self) -> str:
        """The scope's content words as one phrase (what is embedded to compare two scopes)."""
        return " ".join(self.words)


def scope_of(text: str) -> Scope | None:
    """The scope ``text`` states, or None when it states none (or only framing words)."""
    found = split_scope(text)
    return None if found is None else found[0]


def split_scope(text: str) -> tuple[Scope, str] | None:
    """The scope ``text`` states and the rest of it (what the rule says to do there: "For invoice totals, round
    each line" -> "round each line"), or None when it states no scope."""
    for pattern in (_LEADING, _TRAILING):
        if (match := pattern.search(text)) is not None and (scope := _scope(match.group("scope"))) is not None:
            rest = text[match.end() - 1:] if pattern is _LEADING else text[:match.start()]
            return scope, rest.strip()
    match = _LABEL.match(text)
    if match is not None and len(_WORD.findall(match.group("scope").lower())) <= LABEL_MAX:
        scope = _scope(match.group("scope"))
        return None if scope is None else (scope, text[match.end() - 1:].strip())
    return None


def _scope(phrase: str) -> Scope | None:
    """The scope ``phrase`` names: its content words after its leading frame (stopwords and :data:`FRAMING` words:
    "a task involves", "the question is about"); a framing word inside the name is part of it ("letter case",
    "support requests")."""
    tokens = _WORD.findall(phrase.lower())
    start = 0
    while start < len(tokens) and (tokens[start] in _STOPWORDS or tokens[start] in FRAMING):
        start += 1
    words = tuple(w for w in tokens[start:] if w not in _STOPWORDS)
    if not words or len(words) > TRAILING_MAX:
        return None
    return Scope(phrase.strip(), words)
