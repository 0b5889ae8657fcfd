"""When two entries say the same thing: near-duplicates (word-level similarity, the negation guard) and paraphrases
(a deterministic lexical test over content words, no model)."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass

NEAR_DUPLICATE_THRESHOLD = 0.9

_APOSTROPHES = re.compile(r"['\u2019`]")
_PUNCTUATION = re.compile(r"[^\w\s]|_")
_NEGATIONS = frozenset(
    {"not", "no", "never", "nor", "none", "nothing", "cannot", "without"}
    | {"dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "cant", "couldnt", "wont", "wouldnt"}
    | {"shouldnt", "mustnt", "neednt", "hasnt", "havent", "hadnt"}
)


def normalise_text(text: str) -> str:
    """Lowercase, drop apostrophes (``don't`` -> ``dont``), turn other punctuation into spaces, collapse spaces."""
    text = _APOSTROPHES.sub("", text.lower())
    return " ".join(_PUNCTUATION.sub(" ", text).split())


@dataclass(frozen=True, slots=True)
class ComparableText:
    """A text prepared for similarity checks: its normalised words, their counts, and its negation words."""

    words: tuple[str, ...]
    vocabulary: frozenset[str]
    counts: Counter[str]
    negations: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> ComparableText:
        words = tuple(normalise_text(text).split())
        negations = tuple(sorted(w for w in words if w in _NEGATIONS))
        return cls(words, frozenset(words), Counter(words), negations)


def _similarity(a: ComparableText, b: ComparableText, threshold: float = 0.0) -> float:
    """Word ratio; returns an upper bound below ``threshold`` as soon as a cheap bound rules a match out."""
    if a.words == b.words:
        return 1.0
    total = len(a.words) + len(b.words)
    if not a.words or not b.words:
        return 0.0
    upper = 2.0 * min(len(a.words), len(b.words)) / total  # length bound (difflib's real_quick_ratio)
    if upper < threshold:
        return upper
    # Each distinct word of one text missing from the other costs at least one match (set ops run in C).
    matches = min(len(a.words) - len(a.vocabulary - b.vocabulary), len(b.words) - len(b.vocabulary - a.vocabulary))
    upper = 2.0 * matches / total
    if upper < threshold:
        return upper
    upper = 2.0 * sum((a.counts & b.counts).values()) / total  # shared-word bound (difflib's quick_ratio)
    if upper < threshold:
        return upper
    return difflib.SequenceMatcher(None, a.words, b.words, autojunk=False).ratio()


def near_duplicate_score(a: ComparableText, b: ComparableText, threshold: float) -> float | None:
    """Similarity when the texts are near-duplicates, else ``None``."""
    if a.negations != b.negations:
        return None
    score = _similarity(a, b, threshold)
    return score if score >= threshold else None


def text_similarity(a: str, b: str) -> float:
    """Similarity in [0, 1] of two texts: difflib's ratio ``2*M/T`` over the words of their normalised forms.

    Word-level ratio rather than character-level: it counts the share of words two entries have in common, in
    order (unlike Jaccard over shingles, where one changed word in a short entry removes three shingles and a
    0.9 threshold means "identical"). It is deterministic (``autojunk`` is off) and cheap: an entry is tens of
    words, and length and shared-word bounds skip most pairs. With the 0.9 threshold, one changed word is
    tolerated from 10 words on; in shorter entries one word usually changes the meaning.
    """
    return _similarity(ComparableText.of(a), ComparableText.of(b))


def is_near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE_THRESHOLD) -> bool:
    """True when :func:`text_similarity` is at least ``threshold`` and both say "not" the same way.

    The negation guard keeps "always X" and "never X" (or "do not X") apart, which a purely lexical
    similarity would call near-identical in a long entry.
    """
    return near_duplicate_score(ComparableText.of(a), ComparableText.of(b), threshold) is not None


PARAPHRASE_MIN_OVERLAP = 0.8
PARAPHRASE_MIN_JACCARD = 0.6
_STOPWORDS = frozenset(
    "a an the to of for in on at by with and or is are be been being was were it its this that these those as from"
    " into than then so do does did you your we our they their should must can could will would may might please"
    " when whenever while if always remember note make sure instead rather using use"
    " apply any every each all".split()
)


def _stem(word: str) -> str:
    """A crude suffix strip (``parsing`` and ``parse`` -> ``pars``, ``applied`` -> ``apply``), so inflections
    compare equal."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix) and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def content_words(text: ComparableText) -> frozenset[str]:
    """The stemmed words of a text that carry its meaning (no stop words, no negations)."""
    return frozenset(_stem(w) for w in text.vocabulary if w not in _STOPWORDS and w not in _NEGATIONS)


def paraphrase_score(a: ComparableText, b: ComparableText) -> float | None:
    """Jaccard similarity of the content words when two texts read as one lesson in other words, else ``None``."""
    if a.negations != b.negations:
        return None
    words_a, words_b = content_words(a), content_words(b)
    if len(words_a) < 3 or len(words_b) < 3:
        return None
    if {w for w in words_a if any(c.isdigit() for c in w)} != {w for w in words_b if any(c.isdigit() for c in w)}:
        return None  # numbers and ids (R08, 29, 2024) must agree
    shared = len(words_a & words_b)
    overlap = shared / min(len(words_a), len(words_b))
    jaccard = shared / len(words_a | words_b)
    return jaccard if overlap >= PARAPHRASE_MIN_OVERLAP and jaccard >= PARAPHRASE_MIN_JACCARD else None


def is_paraphrase(a: str, b: str) -> bool:
    """True when two texts look like one lesson in other words: a deterministic lexical test, no model.

    Both texts are reduced to their content words (normalised, stop words and filler such as "remember" or
    "make sure" dropped, a crude suffix strip); they are paraphrases when the shared words are at least 80% of the
    smaller set and 60% of the union, their numbers and ids (any word with a digit) are the same, and they say
    "not" the same way. Word order does not matter, so reordered clauses match; synonyms do not (``bench/
    paraphrase_catch.py`` measures the catch and false-merge rates on a hand-written set).
    """
    return paraphrase_score(ComparableText.of(a), ComparableText.of(b)) is not None
