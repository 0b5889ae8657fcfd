"""Shared pieces of the playbook tests: entries, the version-3 playbook, byte forms of results, property strategies."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, DeleteOp, MergeOp, Operation, PlaybookEntry, TagOp, UpdateOp
from combee_core.playbook import ApplyResult, Playbook, make_entry_id

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


def base_playbook() -> Playbook:
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


# Strategies of the property tests (also used by test_budget and test_curation_properties).
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
