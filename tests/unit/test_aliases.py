"""Aliases (issue 38 item 3, ``combee_core.playbook.aliases``): a wording folded into an entry on closeness in
meaning alone is kept with the entry (in the version, replayed alike, at most ``MAX_ALIASES`` and saying so when the
bound binds), later ADDs are matched against the entry's text and its aliases, and a match through an alias never
raises a counter."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import (
    MAX_ALIASES,
    AddOp,
    MergeOp,
    Operation,
    PartialUpdate,
    PlaybookEntry,
    PlaybookVersion,
    UpdateOp,
    Usage,
)
from combee_core.playbook import Playbook, apply_operations, render_playbook
from combee_core.playbook.meaning import Judgement
from combee_core.playbook.uncertain import UncertainJudge, contest_uncertain_adds, kept_pairs
from combee_core.reduce.deterministic_merge import ContestedMerge
from combee_core.reduce.reduction import ScanResult, build_version
from combee_core.serve.review import load_book
from combee_core.serve.served import served_to_agents
from streams.cli.playbook import render
from tests.unit.test_review import decide, entry, version

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENTRY = "gen-00001"
RULE = "Remove duplicate rows before counting records."
CLOSE = "Count records only after duplicates have been dropped."  # the rule's lesson, by closeness alone
FAR = "Deduplicated data gives the right totals."  # close to CLOSE, not to RULE
FLIP = "Count records before duplicates have been dropped."  # contradicts CLOSE


class StubJudge:
    """Verdicts by table, symmetric: ``same`` pairs (closeness in meaning), ``conflict`` pairs, else distinct."""

    def __init__(self, same: Sequence[tuple[str, str]], conflict: Sequence[tuple[str, str]] = ()) -> None:
        self.same = {frozenset(p) for p in same}
        self.conflict = {frozenset(p) for p in conflict}

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        pair = frozenset((new, old))
        if new == old or pair in self.same:
            return Judgement("same", 0.7 if new != old else 1.0, "same meaning (0.70)")
        if pair in self.conflict:
            return Judgement("conflict", 0.8, "flipped order")
        return Judgement("distinct", 0.1, "meaning 0.10 < 0.5")


def _trusting(*same: tuple[str, str], conflict: Sequence[tuple[str, str]] = (),
              kept: frozenset[tuple[str, str]] = frozenset()) -> UncertainJudge:
    """A real reducer's path after a silent call: the judge's cosine-only verdicts stand, unconfirmed."""
    return UncertainJudge.trusting(StubJudge(same, conflict), kept)  # type: ignore[arg-type]


def _playbook(aliases: Sequence[str] = ()) -> Playbook:
    return Playbook.from_entries("pb", 1, [PlaybookEntry(entry_id=ENTRY, section="general", content=RULE, helpful=4,
                                                         created_version=1, updated_version=1,
                                                         aliases=list(aliases))])


def _add(text: str, support: int = 2) -> AddOp:
    return AddOp(section="general", content=text, support=support)


def test_a_fold_on_closeness_alone_keeps_the_wording_as_an_alias_and_raises_no_counter() -> None:
    result = apply_operations(_playbook(), [_add(CLOSE)], 2, judge=_trusting((CLOSE, RULE)))
    [entry] = result.playbook.entries
    assert (entry.content, entry.helpful, entry.aliases) == (RULE, 4, [CLOSE])
    assert entry.updated_version == 2
    [applied] = result.applied
    assert applied.entry_id == ENTRY and "no counter raised" in applied.reason and "kept as alias 1" in applied.reason


def test_a_later_add_matching_only_an_alias_is_folded_into_the_entry_without_a_counter() -> None:
    judge = _trusting((CLOSE, RULE), (FAR, CLOSE))  # FAR is distinct from RULE itself
    result = apply_operations(_playbook([CLOSE]), [_add(FAR, support=5)], 2, judge=judge)
    [entry] = result.playbook.entries  # no second entry for the lesson
    assert entry.helpful == 4 and entry.harmful == 0
    assert entry.aliases == [CLOSE]  # aliases do not chain: FAR matched through an alias is not kept as one
    [applied] = result.applied
    assert applied.entry_id == ENTRY and applied.reason.startswith(f"folded into {ENTRY}, no counter raised: alias")


def test_without_aliases_the_same_add_is_a_new_entry() -> None:
    judge = _trusting((CLOSE, RULE), (FAR, CLOSE))
    result = apply_operations(_playbook(), [_add(FAR)], 2, judge=judge)
    assert sorted(e.content for e in result.playbook.entries) == sorted([RULE, FAR])


def test_an_alias_match_never_raises_counters_even_for_a_near_duplicate_of_the_alias() -> None:
    near = CLOSE.replace("dropped.", "dropped!")  # a near-duplicate of the alias: certain against it, not the rule
    judge = _trusting((CLOSE, RULE), (near, CLOSE))
    assert judge.judge(near, "general", CLOSE, "general").reinforces  # certain: it would reinforce an entry
    # the alias restated by 4 traces (below the rule's evidence 5: 9 would supersede it, ``test_unconfirmed_challenge``)
    result = apply_operations(_playbook([CLOSE]), [_add(near, support=9), _add(CLOSE, support=4)], 2, judge=judge)
    [entry] = result.playbook.entries
    assert entry.helpful == 4 and entry.aliases == [CLOSE]


def test_an_add_contradicting_an_alias_is_not_folded_through_the_aliases() -> None:
    judge = _trusting((CLOSE, RULE), (FLIP, FAR), conflict=[(FLIP, CLOSE)])
    folded = apply_operations(_playbook([FAR]), [_add(FLIP)], 2, judge=judge)
    assert [e.content for e in folded.playbook.entries] == [RULE]  # the same as one alias: folded
    result = apply_operations(_playbook([CLOSE, FAR]), [_add(FLIP)], 2, judge=judge)  # and contradicting another
    assert sorted(e.content for e in result.playbook.entries) == sorted([RULE, FLIP])
    assert result.playbook.get(ENTRY).helpful == 4  # type: ignore[union-attr]


def test_a_lesson_kept_apart_from_the_entry_is_kept_apart_from_its_aliases() -> None:
    playbook = _playbook([CLOSE])
    kept = kept_pairs(playbook.entries, [(ENTRY, FAR)])
    assert (FAR, CLOSE) in kept and (FAR, RULE) in kept
    result = apply_operations(playbook, [_add(FAR)], 2, judge=_trusting((CLOSE, RULE), (FAR, CLOSE), kept=kept))
    assert sorted(e.content for e in result.playbook.entries) == sorted([RULE, FAR])


def test_the_alias_bound_binds_and_says_so() -> None:
    wordings = [f"Count the records once duplicate rows are gone, variant {i}." for i in range(MAX_ALIASES + 2)]
    judge = _trusting(*((w, RULE) for w in wordings))
    result = apply_operations(_playbook(), [_add(w) for w in wordings], 2, judge=judge)
    [entry] = result.playbook.entries
    assert entry.aliases == wordings[:MAX_ALIASES] and entry.helpful == 4
    over = result.applied[MAX_ALIASES:]
    assert len(over) == 2 and all(f"alias bound: {ENTRY} holds its {MAX_ALIASES} aliases" in a.reason for a in over)
    assert all(a.outcome == "applied" and a.entry_id == ENTRY for a in over)  # folded all the same, not dropped


def test_an_identical_or_repeated_wording_is_not_stored_twice() -> None:
    judge = _trusting((CLOSE, RULE))
    result = apply_operations(_playbook([CLOSE]), [_add(CLOSE), _add(RULE)], 2, judge=judge)
    [entry] = result.playbook.entries
    assert entry.aliases == [CLOSE] and entry.helpful == 4 + 2  # the entry's own text reinforces as before


def test_merge_keeps_the_union_of_the_aliases_and_update_keeps_them() -> None:
    other = PlaybookEntry(entry_id="gen-00002", section="general", content="Drop duplicates, then count.",
                          created_version=1, updated_version=1, aliases=[FAR, CLOSE])
    playbook = Playbook.from_entries("pb", 1, [*_playbook([CLOSE]).entries, other])
    merged = apply_operations(playbook, [MergeOp(entry_ids=[ENTRY, "gen-00002"], content=RULE)], 2)
    [entry] = merged.playbook.entries
    assert entry.aliases == [CLOSE, FAR]
    updated = apply_operations(merged.playbook, [UpdateOp(entry_id=ENTRY, content="Deduplicate, then count.")], 3)
    assert updated.playbook.entries[0].aliases == [CLOSE, FAR]


def test_aliases_are_never_shown_to_agents() -> None:
    assert CLOSE not in render_playbook(_playbook([CLOSE])).text


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([CLOSE, FAR, FLIP, RULE]), min_size=1, max_size=12),
       st.lists(st.integers(min_value=1, max_value=50), min_size=12, max_size=12))
def test_no_add_raises_a_counter_except_through_the_entrys_own_text(texts: list[str], supports: list[int]) -> None:
    judge = _trusting((CLOSE, RULE), (FAR, CLOSE), conflict=[(FLIP, CLOSE)])
    ops: list[Operation] = [_add(t, s) for t, s in zip(texts, supports, strict=False)]
    # evidence no restatement here outweighs (a wording restated by more traces would take the slot instead:
    # tests/unit/test_unconfirmed_challenge.py)
    strong = _playbook().entries[0].model_copy(update={"helpful": 1000})
    result = apply_operations(Playbook.from_entries("pb", 1, [strong]), ops, 2, judge=judge)
    entry = result.playbook.get(ENTRY)
    own = sum(op.support for op in ops if isinstance(op, AddOp) and op.content == RULE)
    assert entry is not None and entry.helpful == 1000 + own and entry.harmful == 0
    assert len(entry.aliases) <= MAX_ALIASES and RULE not in entry.aliases


def _version(playbook: Playbook, ops: list[Operation], judge: UncertainJudge) -> PlaybookVersion:
    partial = PartialUpdate(playbook_id="pb", batch_id=playbook.version, node=0, k=1, base_version=playbook.version,
                            operations=ops, reflection_ids=["r1", "r2"], trace_ids=["t1", "t2"], items_read=2,
                            expected_items=2, batch_closed_at=NOW)
    scan = ScanResult(operations=ops, usage=Usage(), levels=0, critical_path_s=0.0)
    return build_version(playbook, [partial], scan, published_at=NOW, judge=judge).record


def test_aliases_are_in_the_version_and_a_replay_is_byte_identical() -> None:
    judge = _trusting((CLOSE, RULE), (FAR, CLOSE))
    first = _version(_playbook(), [_add(CLOSE)], judge)
    again = _version(_playbook(), [_add(CLOSE)], judge)
    assert first.to_json_bytes() == again.to_json_bytes()
    restored = PlaybookVersion.from_json_bytes(first.to_json_bytes())  # all a restarted reducer has
    assert restored.entries[0].aliases == [CLOSE] and restored.content_hash == first.content_hash
    playbook = Playbook.from_entries("pb", restored.version, restored.entries, restored.next_entry_number,
                                     restored.curation)
    second = _version(playbook, [_add(FAR)], judge)  # the alias, read back from the record, still matches
    assert [e.content for e in second.entries] == [RULE] and second.entries[0].helpful == 4


def test_an_entry_without_aliases_hashes_as_before_aliases_existed() -> None:
    entry = _playbook().entries[0]
    with_field = PlaybookVersion.compute_hash("pb", 2, 1, 1, [entry], [], [])
    bare = entry.model_dump(mode="json")
    assert bare.pop("aliases") == []
    payload = {"playbook_id": "pb", "version": 2, "parent_version": 1, "batch_id": 1, "entries": [bare],
               "operations": [], "lineage": [], "baseline": {"successes": 0, "failures": 0}, "challenges": []}
    assert with_field == hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def test_the_export_shows_each_entrys_aliases_in_json_and_markdown() -> None:
    v2 = version(2, [entry(ENTRY, RULE, 1).model_copy(update={"aliases": [CLOSE]}), entry("gen-00002", FAR, 2)])
    assert PlaybookVersion.model_validate_json(render(v2, "json")).entries[0].aliases == [CLOSE]
    text = render(v2, "markdown")
    assert f"- alias (folded on closeness alone, no counter): {CLOSE}" in text
    assert text.count("alias (") == 1


# Through the reducer stage's processor after a silent call, a match through an alias is put to the call and then
# left to the judge's verdict on the entry's own text: tests/unit/test_silent_alias.py.


def test_before_the_call_an_add_matching_an_alias_is_sent_to_the_reducer_call() -> None:
    judge = StubJudge([(CLOSE, RULE), (FAR, CLOSE)])
    add = _add(FAR)
    result = contest_uncertain_adds([add], _playbook([CLOSE]).entries, judge)  # type: ignore[arg-type]
    assert isinstance(result, ContestedMerge) and result.contested == [[add]]  # the call may keep it apart
    assert contest_uncertain_adds([add], _playbook().entries, judge) == [add]  # type: ignore[arg-type]
    kept = kept_pairs(_playbook([CLOSE]).entries, [(ENTRY, FAR)])
    assert contest_uncertain_adds([add], _playbook([CLOSE]).entries, judge, kept) == [add]  # type: ignore[arg-type]


def test_in_review_mode_agents_get_no_alias_an_unreviewed_wording() -> None:
    v2 = version(2, [entry(ENTRY, RULE, 1).model_copy(update={"aliases": [CLOSE]})])
    book = load_book([decide(v2, "approve", ENTRY)])
    reviewed = served_to_agents("pb", v2, review_playbooks="pb", book=book)
    assert reviewed is not None and [(e.content, e.aliases) for e in reviewed.entries] == [(RULE, [])]
    assert CLOSE not in reviewed.model_dump_json()


def test_in_review_mode_agents_get_no_pending_correction_nor_pair_kept_apart() -> None:
    from combee_core.models import Challenge, CurationState, KeptApart

    pending = Challenge(entry_id=ENTRY, entry_content=RULE, section="general", content="Never verify the unit.",
                        support=1, first_version=2, last_version=2)
    memory = CurationState(kept_apart=[KeptApart(entry_id=ENTRY, content="Check the currency first.", version=2)])
    v2 = version(2, [entry(ENTRY, RULE, 1)]).model_copy(update={"challenges": [pending], "curation": memory})
    reviewed = served_to_agents("pb", v2, review_playbooks="pb", book=load_book([decide(v2, "approve", ENTRY)]))
    assert reviewed is not None and reviewed.challenges == [] and reviewed.curation == CurationState()
    assert "Never verify" not in reviewed.model_dump_json() and "currency" not in reviewed.model_dump_json()
