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

from combee_core.models import PlaybookEntry
from combee_core.playbook.embedding import Embedder
from combee_core.playbook.render import RenderedPlaybook, render_in_priority
from combee_core.playbook.similarity import ComparableText, content_words
from combee_core.playbook.value import Playbook, entry_value

DEFAULT_TOP_K = 12
"""Entries a task is given when the caller does not say: enough for the few rules one task touches and some
general advice, far fewer than a grown playbook."""


def lexical_relevance(playbook: Playbook, task: str) -> dict[str, float]:
    """Each entry's summed IDF of the content words it shares with ``task`` (0.0: nothing shared)."""
    words = {entry.entry_id: content_words(ComparableText.of(entry.content)) for entry in playbook.entries}
    frequency = Counter(word for entry_words in words.values() for word in entry_words)
    count = len(words)
    task_words = content_words(ComparableText.of(task))
    return {
        entry_id: sum(math.log(1.0 + (count - frequency[w] + 0.5) / (frequency[w] + 0.5))
                      for w in sorted(task_words & entry_words))
        for entry_id, entry_words in words.items()
    }


def embedding_relevance(playbook: Playbook, task: str, embedder: Embedder) -> dict[str, float]:
    """Each entry's cosine to ``task`` (the embedder's rows are unit vectors)."""
    if not playbook.entries:
        return {}
    vectors = embedder.embed([task, *(entry.content for entry in playbook.entries)])
    scores = vectors[1:] @ vectors[0]
    return {entry.entry_id: round(float(score), 6) for entry, score in zip(playbook.entries, scores)}


def rank_for_task(playbook: Playbook, task: str, embedder: Embedder | None = None) -> list[PlaybookEntry]:
    """Every entry, most relevant to ``task`` first (ties by value, then playbook order)."""
    relevance = (embedding_relevance(playbook, task, embedder) if embedder is not None
                 else lexical_relevance(playbook, task))

    def key(entry: PlaybookEntry) -> tuple[float, tuple[int, tuple[str, int, str]]]:
        return (-relevance[entry.entry_id], entry_value(entry))

    return sorted(playbook.entries, key=key)


def render_for_task(playbook: Playbook, task: str, *, k: int = DEFAULT_TOP_K, token_budget: int | None = None,
                    embedder: Embedder | None = None) -> RenderedPlaybook:
    """The ``k`` entries most relevant to ``task`` as prompt text, within ``token_budget`` (fewer when they do not
    fit: taken in relevance order until the first that does not), rendered in playbook order."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if token_budget is not None and token_budget < 0:
        raise ValueError(f"token_budget must be >= 0, got {token_budget}")
    return render_in_priority(playbook, rank_for_task(playbook, task, embedder)[:k], token_budget)
