"""Curation by meaning: embeddings computed once, restatements reinforce across sections, contradictions never do."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, DeleteOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.conflict import conflict_reason
from combee_core.playbook.embedding import EmbeddingCache, EmbeddingError, StaticEmbedder, Vectors
from combee_core.playbook.embedding_models import make_embedder
from combee_core.playbook.meaning import LexicalJudge, SemanticJudge
from combee_core.reduce.deterministic_merge import merge_without_conflict
from tests.unit.embedders import static_embedder


@lru_cache(maxsize=1)
def _static() -> StaticEmbedder:
    return static_embedder()


def _judge() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(_static()))


class CountingEmbedder:
    name = "counting"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return _static().embed(texts)


def _playbook(*contents: tuple[str, str, int]) -> Playbook:
    entries = [PlaybookEntry(entry_id=f"{section[:3]}-{i:05d}", section=section, content=content, helpful=helpful,
                             created_version=1, updated_version=1)
               for i, (section, content, helpful) in enumerate(contents, start=1)]
    return Playbook.from_entries("pb", 1, entries)


def test_the_offline_model_places_a_rewording_closer_than_another_lesson() -> None:
    vectors = _static().embed(["Remove duplicate rows before counting records.",
                               "Count records only after duplicates have been dropped.",
                               "Report distances in kilometers."])
    assert vectors.shape == (3, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_an_entry_is_embedded_once_whatever_the_comparisons() -> None:
    embedder = CountingEmbedder()
    judge = SemanticJudge(EmbeddingCache(embedder))
    playbook = _playbook(("formulas", "Deduplicate the table first, then count the rows.", 0),
                         ("general", "Report distances in kilometers.", 0))
    ops = [AddOp(section="general", content="Remove duplicate rows before counting records."),
           AddOp(section="units", content="Distances in the answer must be given in kilometers.")]
    apply_operations(playbook, ops, 2, judge=judge)
    apply_operations(playbook, ops, 2, judge=judge)
    embedded = [text for call in embedder.calls for text in call]
    assert sorted(embedded) == sorted(set(embedded)) and len(embedded) == 4


def test_a_restatement_in_another_section_reinforces_the_entry() -> None:
    playbook = _playbook(("formulas", "Deduplicate the table first, then count the rows.", 2))
    result = apply_operations(playbook, [AddOp(section="general", support=3,
                                               content="Remove duplicate rows before counting records.")], 2,
                              judge=_judge())
    (entry,) = result.playbook.entries
    assert entry.helpful == 5 and result.applied[0].reason == "restatement of for-00001"


@pytest.mark.parametrize(("a", "b"), [
    ("Apply the discount before computing tax on invoice totals.",
     "Apply the discount after computing tax on invoice totals."),
    ("Convert all timestamps to UTC before comparing them.",
     "Convert all timestamps to local time before comparing them."),
    ("Sort the results in ascending order of price.", "Sort the results in descending order of price."),
    ("Keep the earliest record for each customer.", "Keep the latest record for each customer."),
    ("Show at most 10 rows in the summary.", "Show at most 20 rows in the summary."),
    ("Skip the header row when counting lines.", "Do not skip the header row when counting lines."),
    ("Timeouts are given in seconds.", "Timeouts are given in milliseconds."),
    ("Check the HTTP status code before parsing the body.", "Parse the body first and check the HTTP status code."),
])
def test_opposite_rules_are_a_conflict(a: str, b: str) -> None:
    assert conflict_reason(a, b) is not None and conflict_reason(b, a) is not None
    assert _judge().judge(a, "s", b, "s").kind == "conflict"
    assert LexicalJudge().judge(a, "s", b, "s").kind != "same"


@pytest.mark.parametrize(("a", "b"), [
    ("Apply the discount before computing tax.", "Compute tax after the discount has been taken off."),
    ("Round only the final result, not intermediate values.", "Do not round intermediate results."),
    ("Report distances in kilometers, not miles.", "Distances must be given in kilometers."),
    ("Express percentages with two decimal places.", "Format every percentage to 2 decimal places."),
])
def test_rewordings_of_one_rule_do_not_conflict(a: str, b: str) -> None:
    assert conflict_reason(a, b) is None


def test_a_correction_without_enough_evidence_is_rejected_and_changes_no_counter() -> None:
    playbook = _playbook(("invoices", "Apply the discount after computing tax on invoice totals.", 4))
    correction = AddOp(section="invoices", support=2,
                       content="Apply the discount before computing tax on invoice totals.")
    result = apply_operations(playbook, [correction], 2, judge=_judge())
    assert result.playbook.entries == playbook.entries
    assert result.applied[0].outcome == "rejected" and "conflicts with inv-00001" in result.applied[0].reason


def test_a_correction_with_more_evidence_supersedes_the_rule_recording_both_lineages() -> None:
    playbook = _playbook(("invoices", "Apply the discount after computing tax on invoice totals.", 1))
    correction = AddOp(section="billing", support=5,
                       content="Apply the discount before computing tax on invoice totals.")
    result = apply_operations(playbook, [correction], 2, judge=_judge())
    (entry,) = result.playbook.entries
    assert entry.content == correction.content and entry.helpful == 4  # inherits the evidence it won with
    (add,), (delete,) = result.applied, result.superseded  # one outcome per operation, the DELETE beside them
    assert isinstance(delete.operation, DeleteOp) and delete.entry_id == "inv-00001"
    assert "superseded by bil-00002" in delete.reason and "support 5" in delete.reason
    assert add.outcome == "applied" and "supersedes inv-00001" in add.reason


def test_superseding_respects_the_change_cap() -> None:
    playbook = _playbook(("invoices", "Apply the discount after computing tax on invoice totals.", 0))
    correction = AddOp(section="invoices", support=9,
                       content="Apply the discount before computing tax on invoice totals.")
    result = apply_operations(playbook, [correction], 2, judge=_judge(), max_changes=0)
    assert result.playbook.entries == playbook.entries and result.applied[0].outcome == "rejected"


_RULES = [
    ("Apply the discount before computing tax on invoice totals.",
     "Apply the discount after computing tax on invoice totals."),
    ("Sort by date in descending order to find the most recent order.",
     "Sort by date in ascending order to find the most recent order."),
    ("Retry a failed request at most 3 times.", "Retry a failed request at most 5 times."),
    ("Always quote column names that contain spaces.", "Never quote column names that contain spaces."),
]


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(_RULES), flip=st.booleans(), helpful=st.integers(0, 20), harmful=st.integers(0, 20),
       support=st.integers(1, 40), semantic=st.booleans())
def test_a_correction_never_increases_the_counters_of_the_rule_it_contradicts(
        pair: tuple[str, str], flip: bool, helpful: int, harmful: int, support: int, semantic: bool) -> None:
    rule, correction = pair[::-1] if flip else pair
    entry = PlaybookEntry(entry_id="gen-00001", section="general", content=rule, helpful=helpful, harmful=harmful,
                          created_version=1, updated_version=1)
    playbook = Playbook.from_entries("pb", 1, [entry])
    judge = _judge() if semantic else None
    result = apply_operations(playbook, [AddOp(section="general", content=correction, support=support)], 2,
                              judge=judge)
    after = result.playbook.get("gen-00001")
    if after is not None:
        assert (after.helpful, after.harmful) == (helpful, harmful)


def test_the_deterministic_merge_groups_adds_by_meaning_and_leaves_contradictions_to_the_reducer() -> None:
    judge = _judge()
    restated = [[AddOp(section="general", content="Remove duplicate rows before counting records.", support=2)],
                [AddOp(section="tables", content="Count records only after duplicates have been dropped.")]]
    (merged,) = merge_without_conflict(restated, judge=judge) or []
    assert isinstance(merged, AddOp) and merged.support == 3
    assert merge_without_conflict(restated[::-1], judge=judge) == [merged]
    opposed = [[AddOp(section="general", content=_RULES[0][0])], [AddOp(section="general", content=_RULES[0][1])]]
    assert merge_without_conflict(opposed, judge=judge) is None


def test_a_hosted_model_goes_through_litellm_and_an_unknown_offline_one_is_refused() -> None:
    assert make_embedder("text-embedding-3-small").name == "text-embedding-3-small"
    with pytest.raises(EmbeddingError, match="unknown offline embedding model"):
        make_embedder("combee-static/nothing")


@pytest.mark.parametrize(("a", "b"), [
    ("Carry the tens in sum 1.", "Carry the tens in sum 2."),
    ("For leap years (R08), count the end date as included.", "For date ranges (R09), count the end date as included."),
    ("Escape user input before inserting it into an SQL query.",
     "Escape user input before inserting it into an HTML page."),
    ("Quote file paths that contain spaces.", "Quote arguments that contain spaces."),
])
def test_one_frame_about_different_things_is_two_lessons_not_a_conflict(a: str, b: str) -> None:
    verdict = _judge().judge(a, "s", b, "s")
    assert verdict.kind == "distinct", verdict


_DEV_TEXTS = [
    "Remove duplicate rows before counting records.", "Count records only after duplicates have been dropped.",
    "Report distances in kilometers.", "Report distances in miles.", "Skip the header row when counting lines.",
    "Use the median rather than the mean for skewed salary data.", "Lowercase email addresses before matching.",
]


@settings(max_examples=40, deadline=None)
@given(children=st.lists(st.lists(st.tuples(st.sampled_from(_DEV_TEXTS), st.sampled_from(["a", "b"]),
                                            st.integers(1, 3)), max_size=4), min_size=2, max_size=4),
       seed=st.randoms(use_true_random=False))
def test_the_merge_by_meaning_does_not_depend_on_the_order_of_partials_or_operations(children, seed) -> None:
    ops = [[AddOp(content=text, section=section, support=support) for text, section, support in child]
           for child in children]
    shuffled = [seed.sample(child, len(child)) for child in ops]
    seed.shuffle(shuffled)
    merged = merge_without_conflict(ops, judge=_judge())
    assert merged == merge_without_conflict(shuffled, judge=_judge())
    if merged is not None:  # every unit of support is kept, in one ADD per lesson
        assert sum(op.support for op in merged if isinstance(op, AddOp)) == sum(s for c in children for *_, s in c)


def test_a_version_records_the_superseded_rule_as_a_delete_after_the_operations() -> None:
    from datetime import UTC, datetime

    from combee_core.models import PartialUpdate
    from combee_core.reduce.reduction import ScanResult, build_version

    now = datetime(2026, 1, 1, tzinfo=UTC)
    playbook = _playbook(("invoices", "Apply the discount after computing tax on invoice totals.", 0))
    correction = AddOp(section="invoices", support=3,
                       content="Apply the discount before computing tax on invoice totals.")
    partial = PartialUpdate(playbook_id="pb", batch_id=0, node=0, k=1, base_version=1, operations=[correction],
                            trace_ids=["t1", "t2", "t3"], reflection_ids=["r1", "r2", "r3"], items_read=3,
                            expected_items=3, batch_closed_at=now)  # three traces: a support of 3 is 3 traces
    scan = ScanResult(operations=[correction], usage=partial.usage, levels=0, critical_path_s=0.0)
    record = build_version(playbook, [partial], scan, published_at=now, judge=_judge(), change_share=0.25).record
    assert [(type(a.operation).__name__, a.entry_id) for a in record.operations] == [
        ("AddOp", "inv-00002"), ("DeleteOp", "inv-00001")]
    assert [e.content for e in record.entries] == [correction.content]
