"""Playbook: near-duplicates, deduplication, rendering under a budget, and the operation algebra (properties)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.models import AddOp, AppliedOperation, DeleteOp, MergeOp, Operation, TagOp, UpdateOp
from combee_core.playbook import (
    Playbook,
    apply_operations,
    deduplicate,
    entry_id_number,
    estimate_tokens,
    is_near_duplicate,
    is_paraphrase,
    make_entry_id,
    normalise_text,
    playbook_tokens,
    render_playbook,
    text_similarity,
)
from tests.unit.playbook_support import LONG, PROPERTY, as_bytes, base_playbook, entry, playbook_and_ops, playbooks


@pytest.fixture
def base() -> Playbook:
    return base_playbook()


# ---------------------------------------------------------------------------------------------- near-duplicates


def test_normalise_text() -> None:
    text = "  Don't   USE floats;\nuse\tDecimal(…)! snake_case "
    assert normalise_text(text) == "dont use floats use decimal snake case"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (LONG, LONG.upper() + "!!", True),
        (LONG, LONG.replace("two", "three"), True),  # one word of 16 changed
        (LONG, LONG.replace("always", "never"), False),  # negation guard
        (LONG, LONG.replace("always round", "do not round"), False),
        ("Round up.", "Round down.", False),  # short entries: one word matters
        ("Use the calculator.", "Use a calculator.", False),
        (LONG, "Call the calculator for any arithmetic.", False),
        ("", "", True),
    ],
)
def test_is_near_duplicate(a: str, b: str, expected: bool) -> None:
    assert is_near_duplicate(a, b) is expected
    assert is_near_duplicate(b, a) is expected


def test_similarity_is_symmetric_and_bounded() -> None:
    assert text_similarity(LONG, LONG) == 1.0
    assert 0.9 <= text_similarity(LONG, LONG.replace("two", "three")) < 1.0
    assert text_similarity("a b", "c d") == 0.0


def test_deduplicate_merges_near_identical_entries_per_section() -> None:
    pb = Playbook.from_entries(
        "pb",
        5,
        [
            entry("for-00001", "formulas", LONG, helpful=1),
            entry("for-00002", "formulas", LONG.replace("two", "three"), helpful=4, harmful=1),
            entry("for-00003", "formulas", "Something else entirely."),
            entry("for-00004", "format", LONG, helpful=1),  # another section: not merged
            entry("for-00005", "formulas", LONG + "!", harmful=2),
        ],
    )
    result = deduplicate(pb, 6)
    assert [(a.outcome, a.entry_id) for a in result.applied] == [("applied", "for-00001")]
    (merge,) = [a.operation for a in result.applied]
    assert isinstance(merge, MergeOp) and merge.entry_ids == ["for-00001", "for-00002", "for-00005"]
    assert result.playbook.entry_ids == ("for-00004", "for-00001", "for-00003")
    kept = result.playbook.get("for-00001")
    assert (kept.helpful, kept.harmful, kept.updated_version) == (5, 3, 6)
    assert kept.content == LONG.replace("two", "three"), "content of the best-scoring entry"
    assert deduplicate(result.playbook, 7).applied == []


def test_deduplicate_splits_clusters_bigger_than_a_merge() -> None:
    entries = [entry(make_entry_id("tools", n), "tools", LONG, helpful=1) for n in range(1, 41)]
    result = deduplicate(Playbook.from_entries("pb", 1, entries), 2)
    assert [len(a.operation.entry_ids) for a in result.applied] == [32, 9]
    assert all(a.outcome == "applied" for a in result.applied)
    assert result.playbook.entry_ids == ("too-00001",)
    assert result.playbook.get("too-00001").helpful == 40


# ---------------------------------------------------------------------------------------------- rendering


def test_render_full_playbook(base: Playbook) -> None:
    rendered = render_playbook(base)
    assert rendered.text == (
        "## formulas\n"
        "[for-00001] helpful=3 harmful=1 :: Area of a circle is pi r squared.\n"
        "[for-00002] helpful=0 harmful=2 :: Compound interest is P(1+r)^n.\n"
        "\n"
        "## tools\n"
        "[too-00004] helpful=2 harmful=0 :: Call the calculator for any arithmetic."
    )
    assert rendered.tokens == estimate_tokens(rendered.text) == playbook_tokens(base)
    assert rendered.included_entry_ids == base.entry_ids and rendered.omitted_entry_ids == ()
    assert render_playbook(Playbook.empty("pb")) == render_playbook(Playbook.empty("pb"), 0)
    assert render_playbook(Playbook.empty("pb")).text == ""


def test_render_keeps_one_line_per_entry() -> None:
    pb = Playbook.from_entries("pb", 1, [entry("for-00001", "formulas", "line one\n## fake header\tend")])
    assert render_playbook(pb).text.splitlines()[1] == "[for-00001] helpful=0 harmful=0 :: line one ## fake header end"


def test_estimate_tokens() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_render_under_budget_keeps_the_most_valuable_and_lists_omitted(base: Playbook) -> None:
    # Priority: for-00001 (+2) and too-00004 (+2) tie, playbook order breaks it; for-00002 (-2) last.
    full = render_playbook(base).tokens
    first = len("## formulas\n[for-00001] helpful=3 harmful=1 :: Area of a circle is pi r squared.")
    rendered = render_playbook(base, token_budget=estimate_tokens("x" * first))
    assert rendered.included_entry_ids == ("for-00001",)
    assert rendered.omitted_entry_ids == ("for-00002", "too-00004")
    assert rendered.text == "## formulas\n[for-00001] helpful=3 harmful=1 :: Area of a circle is pi r squared."
    rendered = render_playbook(base, token_budget=full - 1)
    assert rendered.included_entry_ids == ("for-00001", "too-00004")
    assert rendered.omitted_entry_ids == ("for-00002",)
    assert rendered.tokens <= full - 1
    assert rendered.text.index("## formulas") < rendered.text.index("## tools"), "stable section order"
    assert render_playbook(base, 0).omitted_entry_ids == base.entry_ids
    with pytest.raises(ValueError):
        render_playbook(base, -1)


# ---------------------------------------------------------------------------------------------- properties


def check_step(before: Playbook, op: Operation, applied: AppliedOperation, after: Playbook, version: int) -> None:
    """The invariants of one operation, given the playbooks before and after it."""
    b, a = {e.entry_id: e for e in before.entries}, {e.entry_id: e for e in after.entries}
    assert applied.operation == op
    assert len(a) == len(after.entries), "entry ids unique"
    assert all(e.helpful >= 0 and e.harmful >= 0 for e in after.entries)
    for entry_id, e in a.items():
        if b.get(entry_id) != e:
            assert e.updated_version == version, "every changed entry carries the new version"
    if applied.outcome == "rejected":
        assert applied.entry_id is None and applied.reason
        assert after.entries == before.entries and after.next_entry_number == before.next_entry_number
        return
    if isinstance(op, AddOp) and applied.reason == "added":
        assert set(a) - set(b) == {applied.entry_id} and len(a) == len(b) + 1
        assert entry_id_number(applied.entry_id) == before.next_entry_number
        assert after.next_entry_number == before.next_entry_number + 1
        assert a[applied.entry_id].content == op.content and a[applied.entry_id].section == op.section
    elif isinstance(op, AddOp) and applied.reason.startswith("added; supersedes "):  # a contradiction that won
        superseded = applied.reason.removeprefix("added; supersedes ").split(" ", 1)[0]
        assert set(a) - set(b) == {applied.entry_id} and set(b) - set(a) == {superseded}
        won_with = int(applied.reason.split("challenge (support ")[1].split(" ")[0])  # summed over its ADDs
        assert won_with > b[superseded].helpful - b[superseded].harmful
        assert a[applied.entry_id].helpful == won_with - 1  # the winner inherits the evidence it won with
    elif isinstance(op, AddOp):
        kind, _, settled = applied.reason.partition("; ")  # settled: the restated entry contradicts another
        assert kind in (f"near-duplicate of {applied.entry_id}", f"paraphrase of {applied.entry_id}")
        loser = settled.rsplit(", ", 1)[-1].removesuffix(" superseded") if settled.endswith(" superseded") else None
        assert set(b) - set(a) == ({loser} if loser else set()) and set(a) <= set(b)
        target = b[applied.entry_id]
        similar = is_near_duplicate if kind.startswith("near-duplicate") else is_paraphrase
        assert target.section == op.section and similar(target.content, op.content)
        if applied.entry_id in a:
            assert a[applied.entry_id].helpful == target.helpful + op.support
    else:
        assert after.next_entry_number == before.next_entry_number, "only ADD moves the counter"
    if isinstance(op, DeleteOp):
        assert set(b) - set(a) == {op.entry_id} and len(a) == len(b) - 1
    if isinstance(op, TagOp):
        assert list(a) == list(b)
        delta = {"helpful": (op.count, 0), "harmful": (0, op.count), "neutral": (0, 0)}[op.tag]
        old, new = b[op.entry_id], a[op.entry_id]
        assert (new.helpful - old.helpful, new.harmful - old.harmful) == delta
    if isinstance(op, UpdateOp):
        assert list(a) == list(b) and a[op.entry_id].content == op.content
    if isinstance(op, MergeOp):
        keep, *others = op.entry_ids
        assert set(b) - set(a) == set(others) and set(a) <= set(b)
        merged = [b[i] for i in op.entry_ids]
        assert a[keep].helpful == sum(e.helpful for e in merged)
        assert a[keep].harmful == sum(e.harmful for e in merged)
        assert a[keep].content == op.content


@PROPERTY
@given(playbook_and_ops())
def test_property_operation_algebra(case: tuple[Playbook, list[Operation]]) -> None:
    pb, ops = case
    result = apply_operations(pb, ops, 4)  # never raises
    assert len(result.applied) == len(ops)
    assert [a.operation for a in result.applied] == ops
    # Applying op by op gives the same playbook and outcomes; check every step's invariants on the way.
    current, ever_seen, removed = apply_operations(pb, [], 4).playbook, set(pb.entry_ids), set()
    for op, applied in zip(ops, result.applied, strict=True):
        step = apply_operations(current, [op], 4)
        (alone,) = step.applied
        assert (alone.outcome, alone.entry_id) == (applied.outcome, applied.entry_id)  # reasons may differ
        check_step(current, op, applied, step.playbook, 4)
        created = set(step.playbook.entry_ids) - set(current.entry_ids)
        assert not created & ever_seen, "an id is never reused"
        ever_seen |= created
        gone = set(current.entry_ids) - set(step.playbook.entry_ids)
        if applied.outcome == "rejected" and getattr(op, "entry_id", None) in removed:
            assert f"entry {op.entry_id} was removed earlier in this batch" in applied.reason
        removed |= gone
        current = step.playbook
    assert current == result.playbook
    assert result.playbook.version == 4
    assert as_bytes(result) == as_bytes(apply_operations(pb, ops, 4)), "deterministic"


@PROPERTY
@given(playbooks(), st.integers(0, 200))
def test_property_render_respects_budget(pb: Playbook, budget: int) -> None:
    rendered = render_playbook(pb, budget)
    assert rendered.tokens == estimate_tokens(rendered.text) <= budget
    assert sorted(rendered.included_entry_ids + rendered.omitted_entry_ids) == sorted(pb.entry_ids)
    assert rendered.included_entry_ids == tuple(i for i in pb.entry_ids if i in rendered.included_entry_ids)
    by_value = [e.entry_id for e in sorted(pb.entries, key=lambda e: e.harmful - e.helpful)]  # stable sort
    assert set(by_value[: len(rendered.included_entry_ids)]) == set(rendered.included_entry_ids), (
        "never a less valuable entry included while a more valuable one is omitted"
    )
    for entry_id in rendered.included_entry_ids:
        assert f"[{entry_id}]" in rendered.text
    if estimate_tokens(render_playbook(pb).text) <= budget:
        assert rendered == render_playbook(pb)


@PROPERTY
@given(playbooks())
def test_property_deduplicate_preserves_counters(pb: Playbook) -> None:
    result = deduplicate(pb, 4)
    assert all(a.outcome == "applied" and isinstance(a.operation, MergeOp) for a in result.applied)
    assert sum(e.helpful for e in result.playbook.entries) == sum(e.helpful for e in pb.entries)
    assert sum(e.harmful for e in result.playbook.entries) == sum(e.harmful for e in pb.entries)
    before = {e.entry_id: e for e in pb.entries}
    for a in result.applied:
        cluster = [before[i] for i in a.operation.entry_ids]
        best = max(cluster, key=lambda e: (e.helpful - e.harmful, -pb.entry_ids.index(e.entry_id)))
        assert a.operation.content == best.content, "merged content is the best entry's"
        assert len({e.section for e in cluster}) == 1
    removed = sum(len(a.operation.entry_ids) - 1 for a in result.applied)
    assert len(result.playbook) == len(pb) - removed
    assert set(result.playbook.entry_ids) <= set(pb.entry_ids)
    assert as_bytes(result) == as_bytes(deduplicate(pb, 4))
