"""Retrieval: the entries a task needs, deterministic and within the budget."""

from __future__ import annotations

import numpy as np
import pytest

from combee_core.models import PlaybookEntry
from combee_core.playbook import Playbook
from combee_core.playbook.render import render_entry
from combee_core.playbook.retrieval import RetrievalIndex, lexical_relevance, rank_for_task, render_for_task


def _entry(n: int, section: str, content: str, helpful: int = 0) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"{section[:3]}-{n:05d}", section=section, content=content, helpful=helpful,
                         harmful=0, created_version=1, updated_version=1)


PLAYBOOK = Playbook.from_entries("pb", 3, [
    _entry(1, "invoices", "Apply the discount before computing tax on invoice totals.", helpful=2),
    _entry(2, "dates", "Convert timestamps to UTC before comparing dates.", helpful=9),
    _entry(3, "dates", "Parse dates in ISO 8601 format.", helpful=1),
    _entry(4, "general", "Check the units of every quantity.", helpful=20),
    _entry(5, "sql", "Quote identifiers in generated SQL queries.", helpful=0),
])


def test_the_entries_sharing_the_task_s_words_come_first_and_the_rarest_word_weighs_most():
    ranked = rank_for_task(PLAYBOOK, "Compute the tax of this invoice after the discount")
    assert ranked[0].entry_id == "inv-00001"
    scores = lexical_relevance(PLAYBOOK, "compare two dates given as timestamps")
    assert scores["dat-00002"] > scores["dat-00003"] > 0 == scores["sql-00005"]


def test_without_shared_words_the_more_valuable_entry_ranks_first():
    ranked = rank_for_task(PLAYBOOK, "zzz qqq")
    assert [e.entry_id for e in ranked][:2] == ["gen-00004", "dat-00002"]


def test_top_k_within_the_budget_rendered_in_playbook_order_and_the_rest_omitted():
    rendered = render_for_task(PLAYBOOK, "tax on the invoice total, dates in UTC", k=2)
    assert set(rendered.included_entry_ids) == {"inv-00001", "dat-00002"}
    assert list(rendered.included_entry_ids) == sorted(rendered.included_entry_ids,
                                                       key=lambda i: PLAYBOOK.entry_ids.index(i))
    assert len(rendered.omitted_entry_ids) == 3
    line = render_entry(PLAYBOOK.entries[0])
    tight = render_for_task(PLAYBOOK, "tax on the invoice total, dates in UTC", k=5,
                            token_budget=len(line) // 4 + 8)
    assert tight.tokens <= len(line) // 4 + 8 and tight.included_entry_ids == ("inv-00001",)
    assert render_for_task(PLAYBOOK, "anything", k=0).included_entry_ids == ()
    with pytest.raises(ValueError, match="k must be"):
        render_for_task(PLAYBOOK, "anything", k=-1)


def test_the_same_version_and_task_give_the_same_text():
    task = "dates and SQL"
    assert render_for_task(PLAYBOOK, task, k=3) == render_for_task(PLAYBOOK, task, k=3)


class _AxisEmbedder:
    """Texts mentioning 'sql' point one way, everything else another."""

    def embed(self, texts):
        rows = [[1.0, 0.0] if "sql" in t.lower() else [0.0, 1.0] for t in texts]
        return np.asarray(rows, dtype=np.float32)


def test_with_an_embedder_relevance_is_the_cosine():
    ranked = rank_for_task(PLAYBOOK, "write SQL", embedder=_AxisEmbedder())
    assert ranked[0].entry_id == "sql-00005"


class _CountingEmbedder(_AxisEmbedder):
    def __init__(self):
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


@pytest.mark.parametrize("embedder", [None, _AxisEmbedder()])
def test_an_index_built_once_per_version_renders_what_render_for_task_renders(embedder):
    index = RetrievalIndex.build(PLAYBOOK, embedder)
    for task in ("write SQL", "tax on the invoice total, dates in UTC", "zzz", ""):
        for k, budget in ((1, None), (3, None), (5, 30)):
            assert index.render(task, k=k, token_budget=budget) == render_for_task(
                PLAYBOOK, task, k=k, token_budget=budget, embedder=embedder)


def test_an_index_embeds_each_entry_once_and_then_only_the_task():
    embedder = _CountingEmbedder()
    index = RetrievalIndex.build(PLAYBOOK, embedder)
    assert embedder.texts == len(PLAYBOOK.entries)
    index.render("write SQL", k=2)
    index.render("dates", k=2)
    assert embedder.texts == len(PLAYBOOK.entries) + 2
