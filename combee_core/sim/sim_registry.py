"""Which rule each text of honest mode states, known by construction (``docs/simulator.md``, "Honest mode").

Every text the honest simulator can write is enumerated here from the suite's families: each wording of a family's
rule (polarity +1) and of its opposite (-1), its hints (0), the four generic tips, and the suite's canonical sentence
with and without its ``(Rnn)`` tag. The simulator writes only these texts, and the honest scoring reads only this
table. Curation (``combee_core.playbook``, ``combee_core.reduce.reduction``, ``combee_core.processors``) never imports
it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from combee_core.errors import CombeeError
from combee_core.sim.suite import HARMFUL_ACTION, RuleFamily, build_families
from combee_core.sim.wordings import ACTION_PHRASINGS, GENERIC_PHRASINGS, HINTS, STRUCTURES, SUBJECT_PHRASINGS

_SPACES = re.compile(r"\s+")
_RULE = re.compile(r"^For (.+) \((R\d+)\), (.+)\.$")


class RegistryError(CombeeError):
    """The registry would map one text to two different statements."""


@dataclass(frozen=True, slots=True)
class Statement:
    """What a text states: a family's rule (+1), its opposite (-1), a hint about it (0), or a generic tip."""

    kind: Literal["rule", "hint", "generic"]
    subject: str
    """The family id (``R08``) for rules and hints, ``generic:<n>`` for a generic tip."""
    polarity: int


def normalise_text(text: str) -> str:
    """The registry's key: lower case, single spaces, no trailing punctuation."""
    return _SPACES.sub(" ", text).strip().lower().rstrip(".!;:, ")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def word_rule(subject: str, action: str, structure: int) -> str:
    """One sentence: ``STRUCTURES[structure]`` filled with a subject and an action phrasing."""
    return STRUCTURES[structure].format(s=subject, a=action, S=_cap(subject), A=_cap(action))


def family_parts(family: RuleFamily) -> tuple[str, str]:
    """(subject, action) of a family, read from its canonical sentence ``For <subject> (Rnn), <action>.``."""
    match = _RULE.match(family.insight)
    if not match:
        raise RegistryError(f"family {family.family_id}: insight {family.insight!r} is not 'For S (Rnn), A.'")
    return match.group(1), match.group(3)


@dataclass(frozen=True)
class TextRegistry:
    """Text (normalised) -> statement, and the wordings honest mode draws from."""

    statements: dict[str, Statement] = field(default_factory=dict)
    wordings: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    """(family id, +1 or -1) -> every wording of the rule or of its opposite, in a fixed order."""
    hints: dict[str, tuple[str, ...]] = field(default_factory=dict)
    generics: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(section, wordings) of each generic tip."""
    sections: dict[str, str] = field(default_factory=dict)
    """Family id -> the family's playbook section."""
    actions: dict[str, str] = field(default_factory=dict)
    """Family id -> the family's action as the suite writes it (keys ``combee_core.sim.instances.TEMPLATES``)."""

    def lookup(self, text: str) -> Statement | None:
        """What ``text`` states, or None when no honest-mode generator wrote it."""
        return self.statements.get(normalise_text(text))

    def _add(self, text: str, statement: Statement) -> None:
        key = normalise_text(text)
        known = self.statements.setdefault(key, statement)
        if known != statement:
            raise RegistryError(f"{text!r} would state both {known} and {statement}")


def build_registry(families: Sequence[RuleFamily]) -> TextRegistry:
    """Enumerate every text honest mode can generate for these families. Raises :class:`RegistryError` when a text
    would be ambiguous or a family's subject or action has no hand-written phrasings."""
    registry = TextRegistry()
    for family in families:
        subject, action = family_parts(family)
        if subject not in SUBJECT_PHRASINGS or action not in ACTION_PHRASINGS:
            raise RegistryError(f"family {family.family_id}: no phrasings for {subject!r} / {action!r}")
        subjects = SUBJECT_PHRASINGS[subject]
        for polarity, actions in zip((1, -1), ACTION_PHRASINGS[action]):
            texts = tuple(word_rule(s, a, n) for n in range(len(STRUCTURES)) for s in subjects for a in actions)
            registry.wordings[(family.family_id, polarity)] = texts
            for text in texts:
                registry._add(text, Statement("rule", family.family_id, polarity))
        registry.sections[family.family_id] = family.section
        registry.actions[family.family_id] = action
        registry.hints[family.family_id] = tuple(hint.format(s=s) for hint in HINTS for s in subjects)
        for text in registry.hints[family.family_id]:
            registry._add(text, Statement("hint", family.family_id, 0))
        registry._add(family.insight, Statement("rule", family.family_id, 1))
        registry._add(family.insight.replace(f" ({family.family_id})", ""), Statement("rule", family.family_id, 1))
        registry._add(family.harmful_insight, Statement("rule", family.family_id, -1))
        registry._add(f"For {subject}, {HARMFUL_ACTION}.", Statement("rule", family.family_id, -1))
    generics = []
    for n, (section, texts) in enumerate(GENERIC_PHRASINGS):
        generics.append((section, texts))
        for text in texts:
            registry._add(text, Statement("generic", f"generic:{n}", 1))
    return TextRegistry(registry.statements, registry.wordings, registry.hints, tuple(generics), registry.sections,
                        registry.actions)


@lru_cache(maxsize=8)
def registry_for(suite_seed: int, families: int) -> TextRegistry:
    """The registry of the families of ``build_suite(families, seed=suite_seed)`` (pure; cached because it is rebuilt
    per call)."""
    return build_registry(build_families(families, random.Random(suite_seed)))
