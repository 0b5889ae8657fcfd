"""Playbook: operations, rejections, near-duplicates, deduplication, rendering, and the operation algebra."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, AppliedOperation, DeleteOp, MergeOp, Operation, PlaybookEntry, TagOp, UpdateOp
from combee_core.playbook import (
    ApplyResult,
    Playbook,
    PlaybookError,
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

LONG = "when the grader asks for a percentage always round the final answer to two decimal places"


def entry(entry_id: str, section: str, content: str, helpful: int = 0, harmful: int = 0, v: int = 1) -> PlaybookEntry:
    return PlaybookEntry(
        entry_id=entry_id,
        section=section,
        content=content,
        helpful=helpful,
        harmful=harmful,
        created_version=v,
        updated_version=v,
    )


@pytest.fixture
def base() -> Playbook:
    """Version 3: for-00001, for-00002 (formulas), too-00004 (tools); counter 3 was deleted earlier."""
    return Playbook.from_entries(
        "pb",
        3,
        [
            entry("too-00004", "tools", "Call the calculator for any arithmetic.", helpful=2, v=2),
            entry("for-00001", "formulas", "Area of a circle is pi r squared.", helpful=3, harmful=1),
            entry("for-00002", "formulas", "Compound interest is P(1+r)^n.", harmful=2, v=2),
        ],
    )


def outcomes(result: ApplyResult) -> list[tuple[str, str | None]]:
    return [(a.outcome, a.entry_id) for a in result.applied]


def as_bytes(result: ApplyResult) -> bytes:
    payload = {
        "playbook": [result.playbook.playbook_id, result.playbook.version, result.playbook.next_entry_number],
        "entries": [e.model_dump(mode="json") for e in result.playbook.entries],
        "applied": [a.model_dump(mode="json") for a in result.applied],
    }
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


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

SECTIONS = ["formulas", "format", "tools", "qa"]
WORDS = ["always", "never", "round", "the", "answer", "use", "a", "calculator", "check", "units", "not", "twice"]
TAGS = ["helpful", "harmful", "neutral"]

contents = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)


@st.composite
def playbooks(draw: st.DrawFn) -> Playbook:
    numbers = draw(st.lists(st.integers(1, 30), unique=True, max_size=12))
    entries = [
        PlaybookEntry(
            entry_id=make_entry_id(section := draw(st.sampled_from(SECTIONS)), n),
            section=section,
            content=draw(contents),
            helpful=draw(st.integers(0, 5)),
            harmful=draw(st.integers(0, 5)),
            created_version=1,
            updated_version=draw(st.integers(1, 3)),
        )
        for n in numbers
    ]
    extra = draw(st.integers(0, 5))
    return Playbook.from_entries("pb", 3, entries, next_entry_number=max(numbers, default=0) + 1 + extra)


@st.composite
def playbook_and_ops(draw: st.DrawFn) -> tuple[Playbook, list[Operation]]:
    pb = draw(playbooks())
    # Mostly existing ids; also ids the batch's own ADDs will create, ids used before, and garbage.
    future = [make_entry_id(s, pb.next_entry_number + i) for s in SECTIONS for i in range(4)]
    stale = [make_entry_id(s, n) for s in SECTIONS for n in range(1, pb.next_entry_number)]
    others = st.sampled_from([*future, *(i for i in stale if i not in pb.entry_ids), "x", "tools-1"])
    ids = st.one_of(*[st.sampled_from(pb.entry_ids)] * 3, others) if pb.entry_ids else others
    add_contents = contents
    if len(pb):  # re-adding an existing text (maybe shouted) exercises the near-duplicate path
        add_contents = st.one_of(contents, st.sampled_from([e.content for e in pb.entries]).map(str.upper))
    merge_ids = st.lists(ids, min_size=2, max_size=4)
    if len(pb) >= 2:
        merge_ids = st.one_of(merge_ids, st.lists(st.sampled_from(pb.entry_ids), min_size=2, max_size=4, unique=True))
    op = st.one_of(
        st.builds(AddOp, section=st.sampled_from(SECTIONS), content=add_contents, support=st.integers(1, 3)),
        st.builds(UpdateOp, entry_id=ids, content=contents),
        st.builds(MergeOp, entry_ids=merge_ids, content=contents),
        st.builds(DeleteOp, entry_id=ids),
        st.builds(TagOp, entry_id=ids, tag=st.sampled_from(TAGS), count=st.integers(1, 3)),
    )
    return pb, draw(st.lists(op, max_size=25))


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
        assert op.support > b[superseded].helpful - b[superseded].harmful
    elif isinstance(op, AddOp):
        assert applied.reason in (f"near-duplicate of {applied.entry_id}", f"paraphrase of {applied.entry_id}")
        assert list(a) == list(b)
        target = b[applied.entry_id]
        similar = is_near_duplicate if applied.reason.startswith("near-duplicate") else is_paraphrase
        assert target.section == op.section and similar(target.content, op.content)
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
