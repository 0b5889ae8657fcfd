"""The entries a task needs: a playbook's entries ranked by relevance to the task's text, the top ``k`` of them
rendered within a token budget.

Relevance is the cosine of sentence embeddings when an :class:`~combee_core.playbook.embedding.Embedder` is given,
else lexical: the summed inverse document frequency (over the playbook's entries) of the stemmed content words the
task and the entry share. Ties, and entries the task shares nothing with, go by ``helpful - harmful`` then playbook
order, so the selection is deterministic for a given version and task.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from combee_core.models import PlaybookEntry
from combee_core.playbook.embedding import Embedder, Vectors
from combee_core.playbook.render import RenderedPlaybook, render_in_priority
from combee_core.playbook.similarity import ComparableText, content_words
from combee_core.playbook.value import Playbook, entry_value

DEFAULT_TOP_K = 12
"""Entries a task is given when the caller does not say: enough for the few rules one task touches and some
general advice, far fewer than a grown playbook."""


@dataclass(frozen=True, eq=False)
class RetrievalIndex:
    """What ranking needs of one playbook version, computed once: each entry's content words and how many entries
    hold each word, and with an embedder each entry's vector. A client that renders many tasks from one version
    builds it once (ranking 2,000 entries then costs a few milliseconds instead of re-reading every entry)."""

    playbook: Playbook
    words: dict[str, frozenset[str]]
    frequency: Counter[str]
    embedder: Embedder | None = None
    vectors: Vectors | None = None

    @classmethod
    def build(cls, playbook: Playbook, embedder: Embedder | None = None) -> RetrievalIndex:
        words = {e.entry_id: frozenset(content_words(ComparableText.of(e.content))) for e in playbook.entries}
        frequency = Counter(word for entry_words in words.values() for word in entry_words)
        vectors = (embedder.embed([e.content for e in playbook.entries])
                   if embedder is not None and playbook.entries else None)
        return cls(playbook, words, frequency, embedder, vectors)

    def lexical_relevance(self, task: str) -> dict[str, float]:
        """Each entry's summed IDF of the content words it shares with ``task`` (0.0: nothing shared)."""
        count = len(self.words)
        frequency = self.frequency
        task_words = content_words(ComparableText.of(task))
        return {
            entry_id: sum(math.log(1.0 + (count - frequency[w] + 0.5) / (frequency[w] + 0.5))
                          for w in sorted(task_words & entry_words))
            for entry_id, entry_words in self.words.items()
        }

    def embedding_relevance(self, task: str) -> dict[str, float]:
        """Each entry's cosine to ``task`` (the embedder's rows are unit vectors)."""
        if self.embedder is None or self.vectors is None:
            return {}
        scores = self.vectors @ self.embedder.embed([task])[0]
        return {entry.entry_id: round(float(score), 6) for entry, score in zip(self.playbook.entries, scores)}

    def rank(self, task: str) -> list[PlaybookEntry]:
        """Every entry, most relevant to ``task`` first (ties by value, then playbook order)."""
        relevance = (self.embedding_relevance(task) if self.embedder is not None
                     else self.lexical_relevance(task))

        def key(entry: PlaybookEntry) -> tuple[float, tuple[int, tuple[str, int, str]]]:
            return (-relevance[entry.entry_id], entry_value(entry))

        return sorted(self.playbook.entries, key=key)

    def render(self, task: str, *, k: int = DEFAULT_TOP_K, token_budget: int | None = None) -> RenderedPlaybook:
        """:func:`render_for_task` with this index."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if token_budget is not None and token_budget < 0:
            raise ValueError(f"token_budget must be >= 0, got {token_budget}")
        return render_in_priority(self.playbook, self.rank(task)[:k], token_budget)


def lexical_relevance(playbook: Playbook, task: str) -> dict[str, float]:
    """Each entry's summed IDF of the content words it shares with ``task`` (0.0: nothing shared)."""
    return RetrievalIndex.build(playbook).lexical_relevance(task)


def embedding_relevance(playbook: Playbook, task: str, embedder: Embedder) -> dict[str, float]:
    """Each entry's cosine to ``task`` (the embedder's rows are unit vectors)."""
    return RetrievalIndex.build(playbook, embedder).embedding_relevance(task)


def rank_for_task(playbook: Playbook, task: str, embedder: Embedder | None = None) -> list[PlaybookEntry]:
    """Every entry, most relevant to ``task`` first (ties by value, then playbook order)."""
    return RetrievalIndex.build(playbook, embedder).rank(task)


def render_for_task(playbook: Playbook, task: str, *, k: int = DEFAULT_TOP_K, token_budget: int | None = None,
                    embedder: Embedder | None = None) -> RenderedPlaybook:
    """The ``k`` entries most relevant to ``task`` as prompt text, within ``token_budget`` (fewer when they do not
    fit: taken in relevance order until the first that does not), rendered in playbook order."""
    return RetrievalIndex.build(playbook, embedder).render(task, k=k, token_budget=token_budget)
