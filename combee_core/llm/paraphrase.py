"""The default mode's four paraphrase templates and the meaning key the simulated model understands them by
(``docs/simulator.md``, "Paraphrases"). Pure text functions."""

from __future__ import annotations

import re

PARAPHRASE_FILLER = frozenset({"remember", "make", "sure", "to", "for", "when", "handling", "always"})
"""Words the paraphrase templates add or move; :func:`meaning_key` ignores them (and word order)."""
_KEY_WORD = re.compile(r"[a-z0-9]+")


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def paraphrase(text: str, variant: int) -> str:
    """Wording number ``variant`` (0-3) of a lesson: 0 the text itself, 1 ``Remember: ...``, 2 the clauses swapped
    (``For X, do Y.`` -> ``Do Y for X.``; ``Make sure to ...`` for a text without that shape), 3 ``When handling X,
    do Y.`` (``Always ...`` otherwise). Every wording has the same :func:`meaning_key`."""
    body = text.strip()
    match = re.match(r"^For (.+?), (.+?)[.!]?$", body)
    if variant == 0:
        return body
    if variant == 1:
        return f"Remember: {_lower_first(body)}"
    if variant == 2:
        if match:
            return f"{match.group(2)[:1].upper()}{match.group(2)[1:]} for {match.group(1)}."
        return f"Make sure to {_lower_first(body)}"
    if variant == 3:
        if match:
            return f"When handling {match.group(1)}, {match.group(2)}."
        return f"Always {_lower_first(body)}"
    raise ValueError(f"paraphrase variant must be 0..3, got {variant}")


def meaning_key(text: str) -> tuple[str, ...]:
    """What the simulated model understands of a lesson: its words (lower case), sorted, without the words the
    paraphrase templates add. Two wordings made by :func:`paraphrase` of one text have the same key."""
    return tuple(sorted(w for w in _KEY_WORD.findall(text.lower()) if w not in PARAPHRASE_FILLER))
