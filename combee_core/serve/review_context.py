"""What a reviewer sees beside a proposal (no Kafka): the entry's history across versions, the version and operations
that made its text, the reflections behind that version closest to it, and its likely duplicates and conflicts among
the served entries (curation's own judge, :mod:`combee_core.playbook.meaning`)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from combee_core.models import AddOp, AppliedOperation, PlaybookEntry, PlaybookVersion, Reflection
from combee_core.playbook.embedding import Embedder, EmbeddingCache
from combee_core.playbook.meaning import Judge, LexicalJudge, SemanticJudge


@dataclass(frozen=True)
class HistoryRow:
    """One version at which the entry's text changed (or it appeared, or went away)."""

    version: int
    change: Literal["added", "changed", "removed"]
    section: str
    content: str


def entry_history(versions: Sequence[PlaybookVersion], entry_id: str) -> list[HistoryRow]:
    """The versions (in order) at which ``entry_id`` appeared, changed its section or text, or was removed."""
    rows: list[HistoryRow] = []
    last: PlaybookEntry | None = None
    for version in versions:
        now = next((e for e in version.entries if e.entry_id == entry_id), None)
        if now is not None and (last is None or (last.section, last.content) != (now.section, now.content)):
            rows.append(HistoryRow(version.version, "added" if last is None else "changed", now.section, now.content))
        elif now is None and last is not None:
            rows.append(HistoryRow(version.version, "removed", last.section, last.content))
        last = now
    return rows


def making_version(versions: Sequence[PlaybookVersion], entry: PlaybookEntry) -> PlaybookVersion | None:
    """The first version whose entry ``entry.entry_id`` has this text: the one whose lineage proposed it."""
    for version in versions:
        if any(e.entry_id == entry.entry_id and (e.section, e.content) == (entry.section, entry.content)
               for e in version.entries):
            return version
    return None


def operations_on(version: PlaybookVersion, entry_id: str) -> list[AppliedOperation]:
    """The version's applied operations that created or changed ``entry_id``."""
    return [op for op in version.operations if op.outcome == "applied" and op.entry_id == entry_id]


def added_support(versions: Sequence[PlaybookVersion], entry_id: str) -> int | None:
    """How many reflection copies backed the insight that added ``entry_id`` (its ADD operation's support); None
    when none of ``versions`` added it."""
    for version in versions:
        for applied in operations_on(version, entry_id):
            if isinstance(applied.operation, AddOp):
                return applied.operation.support
    return None


@dataclass(frozen=True)
class NearReflection:
    score: float
    reflection: Reflection
    insight: str


LIKENESS_FLOOR = 0.3
"""The least likeness (word-sequence ratio) at which a reflection is shown as behind an entry: below it, the
insight shares too little wording with the entry to be a guide."""


def closest_reflections(content: str, reflections: Sequence[Reflection], limit: int = 5,
                        floor: float = LIKENESS_FLOOR) -> list[NearReflection]:
    """The reflections' insights most like ``content`` (word-sequence ratio) at ``floor`` or above, best first, ties
    by reflection id: which of a version's reflections most likely proposed the entry (lineage names traces, not
    entries)."""
    words = content.lower().split()
    found = []
    for reflection in reflections:
        best = max(((difflib.SequenceMatcher(None, words, insight.content.lower().split()).ratio(), insight.content)
                    for insight in reflection.insights), default=None)
        if best is not None and round(best[0], 3) >= floor:
            found.append(NearReflection(round(best[0], 3), reflection, best[1]))
    found.sort(key=lambda near: (-near.score, near.reflection.reflection_id))
    return found[:limit]


@dataclass(frozen=True)
class LikelyPair:
    entry_id: str
    other_id: str
    kind: Literal["same", "conflict"]
    score: float
    reason: str


def curation_judge(embedder: Embedder | None, same_meaning: float | None,
                   cache: EmbeddingCache | None = None) -> Judge:
    """The judge curation uses under the same settings (``embedding_model``, ``same_meaning``): by meaning with an
    embedder, else the lexical one. ``cache`` keeps vectors across calls (one per playbook)."""
    if embedder is None:
        return LexicalJudge()
    return SemanticJudge(cache if cache is not None else EmbeddingCache(embedder), same_meaning)


def likely_pairs(proposed: Sequence[PlaybookEntry], entries: Sequence[PlaybookEntry],
                 judge: Judge | None = None) -> list[LikelyPair]:
    """For each proposed entry, the other entries curation's judge calls the same lesson or a contradiction."""
    judge = judge or LexicalJudge()
    judge.prepare([e.content for e in (*proposed, *entries)])
    pairs = []
    for new in proposed:
        for old in entries:
            if old.entry_id == new.entry_id:
                continue
            verdict = judge.judge(new.content, new.section, old.content, old.section)
            if verdict.kind != "distinct":
                pairs.append(LikelyPair(new.entry_id, old.entry_id, verdict.kind, round(verdict.score, 3),
                                        verdict.reason))
    return pairs
