"""Playbook: construction, operations, rejections and their determinism."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from combee_core.models import AddOp, DeleteOp, MergeOp, Operation, TagOp, UpdateOp
from combee_core.playbook import Playbook, PlaybookError, apply_operations, make_entry_id
from tests.unit.playbook_support import LONG, as_bytes, base_playbook, entry, outcomes


@pytest.fixture
def base() -> Playbook:
    return base_playbook()


# ---------------------------------------------------------------------------------------------- construction


def test_empty_playbook() -> None:
    pb = Playbook.empty("pb")
    assert (pb.playbook_id, pb.version, pb.entries, pb.next_entry_number) == ("pb", 0, (), 1)


def test_from_entries_sorts_and_recomputes_counter(base: Playbook) -> None:
    assert base.entry_ids == ("for-00001", "for-00002", "too-00004")
    assert base.next_entry_number == 5
    assert base.sections == ("formulas", "tools")
    assert base.get("for-00002").harmful == 2 and base.get("nope") is None


def test_from_entries_keeps_a_larger_known_counter(base: Playbook) -> None:
    rebuilt = Playbook.from_entries("pb", 3, base.entries, next_entry_number=9)
    assert rebuilt.next_entry_number == 9
    assert Playbook.from_entries("pb", 3, base.entries, next_entry_number=2).next_entry_number == 5


def test_invariants_are_checked() -> None:
    one = entry("for-00001", "formulas", "a")
    with pytest.raises(PlaybookError, match="duplicate"):
        Playbook.from_entries("pb", 1, [one, one])
    with pytest.raises(PlaybookError, match="reuse"):
        Playbook("pb", 1, (one,), next_entry_number=1)
    with pytest.raises(PlaybookError, match="ordered"):
        Playbook("pb", 1, (entry("too-00002", "tools", "b"), one), next_entry_number=3)


def test_ids_sort_numerically_past_five_digits() -> None:
    pb = Playbook.from_entries(
        "pb", 1, [entry("for-100000", "formulas", "b"), entry("for-99999", "formulas", "a")]
    )
    assert pb.entry_ids == ("for-99999", "for-100000")
    assert pb.next_entry_number == 100001
    assert make_entry_id("formulas", 100001) == "for-100001"


# ---------------------------------------------------------------------------------------------- operations


def test_add_creates_entry_with_next_id_and_version(base: Playbook) -> None:
    result = apply_operations(base, [AddOp(section="tools", content="Prefer exact fractions.")], 4)
    assert outcomes(result) == [("applied", "too-00005")]
    new = result.playbook.get("too-00005")
    assert (new.helpful, new.harmful, new.created_version, new.updated_version) == (0, 0, 4, 4)
    assert result.playbook.version == 4 and result.playbook.next_entry_number == 6
    assert base.get("too-00005") is None, "the input playbook is not changed"


def test_add_uses_three_char_section_prefix_and_shared_counter() -> None:
    result = apply_operations(
        Playbook.empty("pb"),
        [AddOp(section="formulas", content="x one"), AddOp(section="format", content="y two"),
         AddOp(section="qa", content="z three")],
        1,
    )
    assert [a.entry_id for a in result.applied] == ["for-00001", "for-00002", "qa-00003"]
    assert result.playbook.entry_ids == ("for-00002", "for-00001", "qa-00003"), "ordered by section first"


def test_add_near_duplicate_reinforces_existing_entry(base: Playbook) -> None:
    op = AddOp(section="formulas", content="area of a circle is PI r squared!", support=3)
    result = apply_operations(base, [op], 4)
    (applied,) = result.applied
    assert (applied.outcome, applied.entry_id) == ("applied", "for-00001")
    assert applied.reason == "near-duplicate of for-00001"
    reinforced = result.playbook.get("for-00001")
    assert (reinforced.helpful, reinforced.harmful, reinforced.updated_version) == (6, 1, 4)
    assert reinforced.content == "Area of a circle is pi r squared.", "existing wording is kept"
    assert result.playbook.entry_ids == base.entry_ids and result.playbook.next_entry_number == 5


def test_add_near_duplicate_only_within_the_same_section(base: Playbook) -> None:
    result = apply_operations(base, [AddOp(section="tools", content="Area of a circle is pi r squared.")], 4)
    assert outcomes(result) == [("applied", "too-00005")]


def test_add_duplicates_inside_one_batch_collapse(base: Playbook) -> None:
    ops = [AddOp(section="tools", content=LONG), AddOp(section="tools", content=LONG.upper() + ".")]
    result = apply_operations(base, ops, 4)
    assert outcomes(result) == [("applied", "too-00005"), ("applied", "too-00005")]
    assert result.playbook.get("too-00005").helpful == 1


def test_update_replaces_content(base: Playbook) -> None:
    result = apply_operations(base, [UpdateOp(entry_id="for-00002", content="A = P(1+r/n)^(nt).")], 4)
    updated = result.playbook.get("for-00002")
    assert (updated.content, updated.harmful, updated.created_version, updated.updated_version) == (
        "A = P(1+r/n)^(nt).", 2, 2, 4,
    )
    assert result.playbook.get("for-00001") == base.get("for-00001"), "untouched entries keep their version"


def test_merge_keeps_first_id_sums_counters_removes_others(base: Playbook) -> None:
    op = MergeOp(entry_ids=["too-00004", "for-00001", "for-00002"], content="Use the calculator for formulas.")
    result = apply_operations(base, [op], 4)
    assert outcomes(result) == [("applied", "too-00004")]
    assert result.playbook.entry_ids == ("too-00004",)
    merged = result.playbook.get("too-00004")
    assert (merged.section, merged.content, merged.helpful, merged.harmful) == (
        "tools", "Use the calculator for formulas.", 5, 3,
    )
    assert (merged.created_version, merged.updated_version) == (2, 4)


def test_delete_removes_and_id_is_never_reused(base: Playbook) -> None:
    result = apply_operations(
        base, [DeleteOp(entry_id="too-00004"), AddOp(section="tools", content="Call the calculator always.")], 4
    )
    assert outcomes(result) == [("applied", "too-00004"), ("applied", "too-00005")]
    assert result.playbook.entry_ids == ("for-00001", "for-00002", "too-00005")


def test_tag_counts_and_neutral_changes_nothing(base: Playbook) -> None:
    ops = [
        TagOp(entry_id="for-00001", tag="helpful", count=4),
        TagOp(entry_id="for-00001", tag="harmful"),
        TagOp(entry_id="too-00004", tag="neutral", count=7),
    ]
    result = apply_operations(base, ops, 4)
    assert [a.outcome for a in result.applied] == ["applied"] * 3
    tagged = result.playbook.get("for-00001")
    assert (tagged.helpful, tagged.harmful, tagged.updated_version) == (7, 2, 4)
    assert result.playbook.get("too-00004") == base.get("too-00004")


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        ([UpdateOp(entry_id="for-00099", content="x")], "unknown entry id for-00099"),
        ([TagOp(entry_id="for-00003", tag="helpful")], "unknown entry id for-00003"),
        ([DeleteOp(entry_id="nope")], "unknown entry id nope"),
        ([MergeOp(entry_ids=["for-00001", "for-00077"], content="x")], "unknown entry id for-00077"),
        ([MergeOp(entry_ids=["for-00001", "for-00001"], content="x")], "listed more than once"),
        ([MergeOp(entry_ids=["for-00001", "for-00002", "for-00001"], content="x")], "listed more than once"),
    ],
)
def test_rejections_change_nothing(base: Playbook, ops: list[Operation], reason: str) -> None:
    result = apply_operations(base, ops, 4)
    (applied,) = result.applied
    assert (applied.outcome, applied.entry_id) == ("rejected", None)
    assert reason in applied.reason
    assert result.playbook.entries == base.entries
    assert result.playbook.next_entry_number == base.next_entry_number


def test_ops_on_entries_removed_earlier_in_the_batch_are_rejected(base: Playbook) -> None:
    ops = [
        DeleteOp(entry_id="for-00002"),
        TagOp(entry_id="for-00002", tag="helpful"),
        MergeOp(entry_ids=["for-00001", "too-00004"], content="merged"),
        UpdateOp(entry_id="too-00004", content="late"),
        MergeOp(entry_ids=["for-00001", "for-00002"], content="again"),
        DeleteOp(entry_id="for-00002"),
    ]
    result = apply_operations(base, ops, 4)
    assert [a.outcome for a in result.applied] == ["applied", "rejected", "applied", "rejected", "rejected", "rejected"]
    assert result.applied[1].reason == "entry for-00002 was removed earlier in this batch (deleted)"
    assert result.applied[3].reason == "entry too-00004 was removed earlier in this batch (merged into for-00001)"
    assert result.playbook.entry_ids == ("for-00001",)
    assert result.playbook.get("for-00001").content == "merged"


def test_new_version_below_current_is_an_error(base: Playbook) -> None:
    with pytest.raises(PlaybookError):
        apply_operations(base, [], 2)


def test_apply_is_deterministic_byte_for_byte(base: Playbook) -> None:
    ops = [
        AddOp(section="tools", content=LONG, support=2),
        TagOp(entry_id="too-00005", tag="harmful"),
        MergeOp(entry_ids=["for-00002", "for-00001"], content="Formulas: area and interest."),
        DeleteOp(entry_id="for-00001"),
    ]
    assert as_bytes(apply_operations(base, ops, 4)) == as_bytes(apply_operations(base, ops, 4))


DETERMINISM_SCRIPT = """
import sys, orjson
from combee_core.models import AddOp, TagOp, MergeOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations, deduplicate, render_playbook
words = "always never round the answer use a calculator check units twice first".split()
def variant(i):  # 3 base texts of 12 words, each with one word changed: near-duplicates of their base
    text = [words[(i % 3 + j) % 12] for j in range(12)]
    text[i % 12] = f"w{i}"
    return " ".join(text)
entries = [PlaybookEntry(entry_id=f"too-{i:05d}", section="tools", content=variant(i), helpful=i % 2,
                         created_version=1, updated_version=1) for i in range(1, 31)]
ops = [AddOp(section=("tools", "formulas")[i % 2], content=variant(i + 40)) for i in range(20)]
ops += [TagOp(entry_id=f"too-{n:05d}", tag="harmful", count=n % 3 + 1) for n in range(1, 40, 3)]
ops += [MergeOp(entry_ids=["too-00002", "too-00004"], content="merged"), TagOp(entry_id="too-00004", tag="helpful")]
result = apply_operations(Playbook.from_entries("pb", 1, entries), ops, 2)
dedup = deduplicate(result.playbook, 3)
assert dedup.applied
out = [[e.model_dump(mode="json") for e in r.playbook.entries] + [a.model_dump(mode="json") for a in r.applied]
       for r in (result, dedup)]
sys.stdout.buffer.write(orjson.dumps([out, render_playbook(dedup.playbook, 120).text]))
"""


def test_deterministic_across_processes_and_hash_seeds() -> None:
    """Set/dict hash order differs between processes; the result must not depend on it."""
    runs = [
        subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    ]
    assert runs[0] and runs[0] == runs[1] == runs[2]
