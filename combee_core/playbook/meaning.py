"""Whether two lessons are one lesson, a contradiction or two lessons: embeddings for closeness in meaning (across
sections), :mod:`~combee_core.playbook.conflict` for what flips a rule, the lexical near-duplicate test as a floor.

Before anything is consolidated, the scopes two lessons state are compared (:mod:`~combee_core.playbook.scope`):
one rule stated for two different scopes is two lessons, never a restatement or a contradiction.

A :class:`Judge` is what curation consults; :class:`LexicalJudge` (no model: near-duplicates and the lexical
paraphrase test, within a section, as before) and :class:`SemanticJudge` (an :class:`EmbeddingCache`) both pass
every pair they would consolidate through the conflict check first, so a contradiction is never a restatement.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from combee_core.playbook.conflict import RuleFeatures, WordSwap, conflict_between, one_word_swap
from combee_core.playbook.embedding import EmbeddingCache, EmbeddingError, Vectors
from combee_core.playbook.instruments import Tool, tool_swap, tools_of
from combee_core.playbook.requirements import Requirement, requirement_flip, requirements_of
from combee_core.playbook.scope import FRAMING, Scope, scope_of, split_scope
from combee_core.playbook.similarity import (
    _STOPWORDS,
    NEAR_DUPLICATE_THRESHOLD,
    ComparableText,
    _similarity,
    paraphrase_score,
)

logger = logging.getLogger(__name__)

SUBSTITUTION_FRAME = 0.6
"""Word ratio from which two texts read as one sentence frame with a part swapped ("escape input for an SQL query" /
"... an HTML page"); the swapped parts must then mean the same (:data:`SUBSTITUTION_SAME`). Tuned on the dev sets."""
SUBSTITUTION_SAME = 0.35
"""Cosine from which two swapped parts (at most 3 content words each) are synonyms ("prefer" / "choose"); also the
cosine from which two stated scopes (:mod:`~combee_core.playbook.scope`) are one scope ("leap years" / "366-day
years")."""
MOVED_FRAME_SHARE = 0.5
"""Share of the shorter text's content words that one run of words both texts share must hold (and at least
:data:`MOVED_FRAME_MIN` of them) for the texts to read as one frame placed differently ("For leap years, treat the
final date as ..." / "Treat the final date as ... in tasks about rounding"): the run is the frame, the rest of each
text its subject, and the subjects (at most :data:`MOVED_FRAME_SUBJECT` content words each) must then mean the same
(:data:`SUBSTITUTION_SAME`). Argued, not tuned: the frame is most of the rule, the subject a short phrase."""
MOVED_FRAME_MIN = 3
MOVED_FRAME_SUBJECT = 6
_PRONOUNS = frozenset("it them they this that these those one ones its their there".split())

FLIP_SIMILARITY = 0.6
"""Word ratio from which the lexical judge checks a pair for a contradiction (below the 0.9 of a near-duplicate)."""

SAME_MEANING = 0.5
"""Cosine from which two lessons are one lesson, unless they conflict, for a model that names none of its own (a
hosted one; the offline models carry theirs: 0.5 MiniLM, 0.5 static). Measured by ``bench/semantic_catch.py``."""



def model_same_meaning(embedder: object) -> float:
    """The cosine from which two lessons are one under ``embedder``: its own tuned value, else :data:`SAME_MEANING`
    (a hosted model's must be measured: ``docs/models.md``, "Embeddings")."""
    value = getattr(embedder, "same_meaning", None)
    return float(value) if isinstance(value, int | float) else SAME_MEANING


def model_related(embedder: object) -> float | None:
    """The cosine from which two lessons are about one subject under ``embedder`` (its ``related`` attribute, measured
    on the dev sets), or None: a model that names none (a hosted one, until measured) gets no requirement check."""
    value = getattr(embedder, "related", None)
    return float(value) if isinstance(value, int | float) else None


Kind = Literal["same", "conflict", "distinct"]


@dataclass(frozen=True, slots=True)
class Judgement:
    kind: Kind
    score: float
    reason: str
    reinforces: bool = True
    """For "same": whether the entry's counters rise by the ADD's support (False: the ADD is folded into the entry
    and raises nothing, a match by closeness alone that no one confirmed: ``combee_core.playbook.uncertain``)."""
    apart: bool = False
    """For "distinct": whether the judge found what sets the lessons apart (another stated scope, different things
    named, one frame about a different subject, a reducer call's keep-both), rather than only not close enough in
    meaning. No wording matched on closeness alone (an alias) may overrule it (``combee_core.playbook.aliases``)."""


class Judge(Protocol):
    """Compares a new lesson with existing ones."""

    def prepare(self, texts: Sequence[str]) -> None:
        """Compute whatever the texts need once (embeddings, in one batch)."""

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement: ...


@runtime_checkable
class GroupJudge(Protocol):
    """A judge that can also compare a new lesson with several wordings of one lesson at once (an entry and its
    aliases: :mod:`~combee_core.playbook.aliases`)."""

    def judge_group(self, new: str, new_section: str, texts: Sequence[str]) -> Judgement: ...


@runtime_checkable
class LessonsJudge(Protocol):
    """A judge that can also tell whether one entry's wordings (its text and aliases) state another's lesson
    (:mod:`~combee_core.playbook.consolidation`)."""

    def judge_lessons(self, texts: Sequence[str], others: Sequence[str]) -> Judgement: ...


def compares_groups(judge: object) -> bool:
    """Whether ``judge`` compares a lesson with several wordings at once (:class:`GroupJudge`); a wrapper's answer is
    its ``inner`` judge's (``combee_core.playbook.uncertain.UncertainJudge`` says "distinct" when it cannot)."""
    inner = getattr(judge, "inner", None)
    return compares_groups(inner) if inner is not None else isinstance(judge, GroupJudge)


def compares_lessons(judge: object) -> bool:
    """Whether ``judge`` compares two entries' wordings (:class:`LessonsJudge`); a wrapper's answer is its ``inner``
    judge's, as in :func:`compares_groups`."""
    inner = getattr(judge, "inner", None)
    return compares_lessons(inner) if inner is not None else isinstance(judge, LessonsJudge)


class _Features:
    def __init__(self) -> None:
        self._rules: dict[str, RuleFeatures] = {}
        self._texts: dict[str, ComparableText] = {}
        self._scopes: dict[str, Scope | None] = {}
        self._requirements: dict[str, tuple[Requirement, ...]] = {}
        self._tools: dict[str, tuple[Tool, ...]] = {}

    def tools(self, text: str) -> tuple[Tool, ...]:
        if text not in self._tools:
            self._tools[text] = tools_of(text)
        return self._tools[text]

    def requirements(self, text: str) -> tuple[Requirement, ...]:
        if text not in self._requirements:
            self._requirements[text] = requirements_of(text)
        return self._requirements[text]

    def scope(self, text: str) -> Scope | None:
        if text not in self._scopes:
            self._scopes[text] = scope_of(text)
        return self._scopes[text]

    def rule(self, text: str) -> RuleFeatures:
        found = self._rules.get(text)
        if found is None:
            found = self._rules[text] = RuleFeatures.of(text)
        return found

    def words(self, text: str) -> ComparableText:
        found = self._texts.get(text)
        if found is None:
            found = self._texts[text] = ComparableText.of(text)
        return found

    def conflict(self, a: str, b: str) -> str | None:
        return conflict_between(self.rule(a), self.rule(b))


class LexicalJudge:
    """No model: within one section, a near-duplicate (word ratio >= 0.9) or a lexical paraphrase is the same
    lesson unless the conflict check says it flips the rule."""

    def __init__(self, threshold: float = NEAR_DUPLICATE_THRESHOLD, paraphrases: bool = True) -> None:
        self.threshold = threshold
        self.paraphrases = paraphrases
        self._features = _Features()

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new_section != old_section:
            return Judgement("distinct", 0.0, "other section")
        a, b = self._features.words(new), self._features.words(old)
        score = _similarity(a, b, FLIP_SIMILARITY)  # exact from FLIP_SIMILARITY on, a bound below it
        if score >= self.threshold and a.negations == b.negations:
            kind = "near-duplicate"
        elif self.paraphrases and (para := paraphrase_score(a, b)) is not None:
            score, kind = para, "paraphrase"
        elif score >= FLIP_SIMILARITY and (why := self._features.conflict(new, old)) is not None:
            return Judgement("conflict", score, why)  # a one-word flip in a short rule, or "not" added
        else:
            return Judgement("distinct", score, "not similar")
        if (why := self._features.conflict(new, old)) is not None:
            return Judgement("conflict", score, why)
        return Judgement("same", score, kind)


class SemanticJudge:
    """Closeness in meaning by cosine of embeddings (across sections), the conflict check on every close pair; a pair
    about one subject (from the model's ``related`` cosine, below the threshold too) is a conflict when one requires
    absent what the other requires present, the two things one in meaning (:mod:`~combee_core.playbook.requirements`:
    "without a timeout" / "needs a time limit")."""

    def __init__(self, cache: EmbeddingCache, same_meaning: float | None = None) -> None:
        """``same_meaning``: None for the model's own (its ``same_meaning`` attribute, else :data:`SAME_MEANING`)."""
        self.cache = cache
        self.same_meaning = same_meaning if same_meaning is not None else model_same_meaning(cache.embedder)
        self.related = model_related(cache.embedder)
        self._features = _Features()

    def prepare(self, texts: Sequence[str]) -> None:
        self.cache.ensure(texts)

    def score(self, a: str, b: str) -> float:
        semantic = float(np.dot(self.cache.vector(a), self.cache.vector(b)))
        lexical = _similarity(self._features.words(a), self._features.words(b), NEAR_DUPLICATE_THRESHOLD)
        return max(semantic, lexical if lexical >= NEAR_DUPLICATE_THRESHOLD else 0.0)  # below: only a bound

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        score = self.score(new, old)
        if score < self.same_meaning:
            if (why := self._reworded_flip(score, new, old)) is not None:
                return Judgement("conflict", score, why)
            return Judgement("distinct", score, f"meaning {score:.2f} < {self.same_meaning}")
        return self._checked(score, new, old)

    def _reworded_flip(self, score: float, new: str, old: str) -> str | None:
        """Why two texts about one subject (at least :attr:`related`) flip a rule in words the conflict check cannot
        read: a requirement with opposite polarity (:meth:`_requirement_flip`) or one action done with another named
        tool (:meth:`_tool_swap`), or None; texts about other stated scopes are two lessons whatever they say."""
        if self.related is None or score < self.related or self._scopes_differ(new, [old]) is not None:
            return None
        return self._requirement_flip(score, new, old) or self._tool_swap(score, new, old)

    def _alike(self, a: str, b: str) -> bool:
        return float(np.dot(self.cache.vector(a), self.cache.vector(b))) >= self.same_meaning

    def _requirement_flip(self, score: float, new: str, old: str) -> str | None:
        """Why the texts require one thing with opposite polarity (the things' cosine at least the threshold: the
        judge would call them one), or None."""
        mine, theirs = self._features.requirements(new), self._features.requirements(old)
        if not mine or not theirs:
            return None
        try:
            self.cache.ensure([r.thing for r in (*mine, *theirs)])
        except EmbeddingError as error:
            logger.warning("requirement test skipped: %s", error)
            return None
        why = requirement_flip(mine, theirs, self._alike)
        return None if why is None else f"{why} (meaning {score:.2f}, one subject from {self.related})"

    def _tool_swap(self, score: float, new: str, old: str) -> str | None:
        """Why the texts do one action (the actions' cosine at least the threshold) with different named tools
        (:mod:`~combee_core.playbook.instruments`), or None."""
        mine, theirs = self._features.tools(new), self._features.tools(old)
        if not mine or not theirs:
            return None
        try:
            self.cache.ensure([p for t in (*mine, *theirs) for p in (t.action, t.thing) if p])
        except EmbeddingError as error:
            logger.warning("instrument test skipped: %s", error)
            return None
        why = tool_swap(mine, theirs, self._alike)
        return None if why is None else f"{why} (meaning {score:.2f}, one subject from {self.related})"

    def judge_group(self, new: str, new_section: str, texts: Sequence[str]) -> Judgement:
        """``new`` against the lesson that ``texts`` (an entry's own text first, then its aliases) all state: its
        cosine with their mean direction (the lesson's prototype; one wording is a noisy sample of the lesson, their
        mean a better estimate) at the judge's own threshold, then the checks :meth:`judge` makes, against the first
        text; a conflict with any of them is a conflict."""
        score = float(np.dot(self.cache.vector(new), self._prototype(texts)))
        if score < self.same_meaning:
            return Judgement("distinct", score, f"meaning {score:.2f} < {self.same_meaning} to the prototype")
        if (why := self._scopes_differ(new, texts)) is not None:
            return Judgement("distinct", score, why, apart=True)
        for text in texts:
            if (why := self._features.conflict(new, text)) is not None:
                return Judgement("conflict", score, why)
        verdict = self._checked(score, new, texts[0])
        if verdict.kind == "same":
            return Judgement("same", score, f"same meaning as the prototype of {len(texts)} wordings ({score:.2f})")
        return verdict

    def judge_lessons(self, texts: Sequence[str], others: Sequence[str]) -> Judgement:
        """Whether ``others`` (one entry's text first, then its aliases) state the lesson of ``texts`` (another's):
        each of them matched to ``texts`` as an ADD of it would be (close enough to one of the texts, or to their
        prototype, at the judge's own threshold), then every pair of wordings through the checks a close pair gets
        (:meth:`_checked`): one conflict, or one reason that sets a pair apart (another scope, other things named,
        one frame about another subject), keeps the lessons apart. When both sides hold several wordings (two
        established lessons), ``texts`` must also be ``others``' lesson on average (their closest scores the other
        way, at the same threshold): one side's few wordings near the other's say nothing of the rest of it."""
        score = 1.0
        for other, closest in zip(others, self._closest(others, texts), strict=True):
            if closest < self.same_meaning:
                return Judgement("distinct", closest, f"{other!r} is at {closest:.2f} < {self.same_meaning} from "
                                 "the other entry's wordings and their prototype")
            score = min(score, closest)
        if len(texts) > 1 and len(others) > 1 and (back := float(np.mean(self._closest(texts, others)))) < (
                self.same_meaning):
            return Judgement("distinct", back, f"the other entry's {len(texts)} wordings are at {back:.2f} < "
                             f"{self.same_meaning} on average from these {len(others)} and their prototype")
        for text in texts:
            for other in others:
                if (verdict := self._checked(score, other, text)).kind != "same":
                    return verdict
        return Judgement("same", score, f"each of {len(others)} wording(s) at least {score:.2f} from one of the other "
                         f"entry's {len(texts)} or their prototype, no pair of them set apart")

    def _closest(self, texts: Sequence[str], others: Sequence[str]) -> list[float]:
        """For each of ``texts``, its score with the closest of ``others`` or with their prototype."""
        centre = self._prototype(others)
        return [max(float(np.dot(self.cache.vector(text), centre)), *(self.score(text, o) for o in others))
                for text in texts]

    def _prototype(self, texts: Sequence[str]) -> Vectors:
        """The unit mean direction of ``texts``' embeddings (a zero vector when they cancel out)."""
        centre: Vectors = np.stack([self.cache.vector(text) for text in texts]).mean(axis=0)
        norm = float(np.linalg.norm(centre))
        return centre / norm if norm > 0 else centre

    def _checked(self, score: float, new: str, old: str) -> Judgement:
        """The verdict on a pair whose closeness in meaning reaches the threshold: a conflict, two things named,
        one frame about different subjects, or the same lesson. Stated scopes that differ come first: "For A, X" and
        "For B, not X" are two lessons, not a contradiction."""
        if (why := self._scopes_differ(new, [old])) is not None:
            return Judgement("distinct", score, why, apart=True)
        if (why := self._features.conflict(new, old) or self._reworded_flip(score, new, old)) is not None:
            return Judgement("conflict", score, why)
        names_new, names_old = self._features.rule(new).names, self._features.rule(old).names
        if names_new and names_old and not (names_new <= names_old or names_old <= names_new):
            return Judgement("distinct", score, f"names different things: {sorted(names_new)} vs {sorted(names_old)}",
                             apart=True)
        word = _word_swap(new, old)
        if word is not None and not word.in_object:
            return Judgement("conflict", score, f"one word swapped in one frame, outside its object: {word.old!r} vs "
                             f"{word.new!r} (one action on one thing done another way)")
        first, second = sorted(_actions(new, old))  # the frame tests do not depend on which text is the new one
        if (swap := self._swapped(first, second) or self._moved_frame(first, second)) is not None:
            return Judgement("distinct", score, swap, apart=True)
        if word is not None:
            return Judgement("conflict", score, f"one word swapped in one frame: {word.old!r} vs {word.new!r} "
                             "(close in meaning: antonyms or synonyms, read as a conflict)")
        return Judgement("same", score, f"same meaning ({score:.2f})")

    def _scopes_differ(self, new: str, texts: Sequence[str]) -> str | None:
        """Why ``new`` is about another scope than the lesson ``texts`` state (or None): it states a scope, some of
        the texts state one, and none of theirs means the same as its own (:data:`SUBSTITUTION_SAME`)."""
        scope = self._features.scope(new)
        others = [found for text in texts if (found := self._features.scope(text)) is not None]
        if scope is None or not others:
            return None
        if any(other.words == scope.words for other in others):
            return None
        try:
            vectors = self.cache.vectors([scope.text, *(other.text for other in others)])
        except EmbeddingError as error:
            logger.warning("scope test skipped: %s", error)
            return None
        closest = float(np.max(vectors[1:] @ vectors[0]))
        if closest >= SUBSTITUTION_SAME:
            return None
        return f"another scope: {scope.phrase!r} vs {others[0].phrase!r} ({closest:.2f} < {SUBSTITUTION_SAME})"

    def _subjects_differ(self, part_a: list[str], part_b: list[str]) -> str | None:
        text_a, text_b = " ".join(part_a), " ".join(part_b)
        try:
            vectors = self.cache.vectors([text_a, text_b])  # dropped with the next version's retain()
        except EmbeddingError as error:
            logger.warning("swapped-part test skipped: %s", error)
            return None
        if float(np.dot(vectors[0], vectors[1])) < SUBSTITUTION_SAME:
            return f"same frame, different subject: {text_a!r} vs {text_b!r}"
        return None

    def _moved_frame(self, a: str, b: str) -> str | None:
        """Why two texts are one frame, placed differently in each, about different subjects (or None): the longest
        run of words they share is most of the rule, and what is left of each, compared alone, differs in meaning."""
        words_a, words_b = self._features.words(a).words, self._features.words(b).words
        run = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False).find_longest_match(
            0, len(words_a), 0, len(words_b))
        shared = _content(words_a[run.a:run.a + run.size])
        if len(shared) < max(MOVED_FRAME_MIN, MOVED_FRAME_SHARE * min(len(_content(words_a)), len(_content(words_b)))):
            return None
        rest_a = _named(words_a[:run.a] + words_a[run.a + run.size:])
        rest_b = _named(words_b[:run.b] + words_b[run.b + run.size:])
        if not rest_a or not rest_b or len(rest_a) > MOVED_FRAME_SUBJECT or len(rest_b) > MOVED_FRAME_SUBJECT:
            return None
        return self._subjects_differ(rest_a, rest_b)

    def _swapped(self, a: str, b: str) -> str | None:
        """Why two texts are one frame about different things (a part swapped for an unrelated one), or None.

        A static embedding averages words, so "Quote file paths that contain spaces" and "Quote arguments that
        contain spaces" come out close; the swapped parts, compared alone, do not."""
        words_a, words_b = self._features.words(a).words, self._features.words(b).words
        matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
        if matcher.ratio() < SUBSTITUTION_FRAME:
            return None
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "replace":
                continue
            part_a, part_b = _named(words_a[i1:i2]), _named(words_b[j1:j2])
            if not part_a or not part_b or len(part_a) > 3 or len(part_b) > 3:
                continue
            if (why := self._subjects_differ(part_a, part_b)) is not None:
                return why
        return None


def _word_swap(a: str, b: str) -> WordSwap | None:
    """The one word swapped between two texts that are one frame otherwise (``conflict.one_word_swap``), unless it
    frames a scope ("tasks" / "questions": ``scope.FRAMING``) or is a pronoun. Swapped outside the sentence's object
    (its verb, an adjunct: "*Lower* the TTL", "greet customers by their *preferred* name") it is one action on one
    thing done another way: a conflict, whatever the two words' cosine. Swapped in the object ("Quote *file paths*
    ..." / "Quote *arguments* ...") the frame test decides: two subjects, or (close in meaning) antonyms or synonyms,
    which an embedding places alike: a conflict, since a conflict only opens a challenge where "same" would reinforce
    the rule being corrected."""
    swap = one_word_swap(a, b)
    if swap is None or any(w in FRAMING or w in _PRONOUNS for w in (swap.old, swap.new)):
        return None
    return swap


def _actions(a: str, b: str) -> tuple[str, str]:
    """What the frame tests compare: when both texts state one scope in the same content words, what each says to do
    there (the scopes taken off: ``scope.split_scope``), else the texts. A scope both state alike is not a part
    either could have swapped, yet its words count towards a shared frame: "Refunds over 30 days: count the end
    date" and "Refunds over 30 days: treat the final date as ..." share most words only through the label, and the
    verbs left over would read as two subjects of one frame."""
    split_a, split_b = split_scope(a), split_scope(b)
    if split_a is None or split_b is None or split_a[0].words != split_b[0].words:
        return a, b
    return split_a[1], split_b[1]


def _content(words: Sequence[str]) -> list[str]:
    return [w for w in words if w not in _STOPWORDS and w not in _PRONOUNS]


def _named(words: Sequence[str]) -> list[str]:
    """The words of a frame test's part that can name a subject: its content words after the words that frame a
    scope at its start ("the question is about" / "a task involves" / "how" name nothing: ``scope.FRAMING``); one
    inside a name is part of it ("upper case")."""
    found = _content(words)
    start = 0
    while start < len(found) and found[start] in FRAMING:
        start += 1
    return found[start:]
