"""Review mode's pure core: decisions, the fold, the reviewed served view, replay."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from combee_core.models import PlaybookEntry, PlaybookVersion, ReviewDecision, UpdateOp, VersionStats
from combee_core.serve.review import (
    ReviewInputError,
    entry_changes,
    inbox,
    items_for,
    load_book,
    make_decision,
    review_on,
    review_state,
    reviewed_view,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def entry(entry_id: str, content: str, version: int, section: str = "general") -> PlaybookEntry:
    return PlaybookEntry(entry_id=entry_id, section=section, content=content, created_version=version,
                         updated_version=version)


def version(number: int, entries: list[PlaybookEntry], pb: str = "pb") -> PlaybookVersion:
    return PlaybookVersion(playbook_id=pb, version=number, parent_version=number - 1, batch_id=number - 1,
                           entries=entries, next_entry_number=len(entries) + 1, operations=[], lineage=[],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash="h", published_at=T0)


def decide(v: PlaybookVersion, action: str, *ids: str, note: str = "", content: str | None = None,
           minute: int = 0, reviewer: str = "ana@host") -> ReviewDecision:
    edit = UpdateOp(entry_id=ids[0], content=content) if content is not None else None
    return ReviewDecision.make(playbook_id=v.playbook_id, action=action, items=items_for(v, list(ids)), note=note,
                               edit=edit, reviewer=reviewer, decided_at=T0 + timedelta(minutes=minute))


V1 = version(1, [entry("e1", "Check units first.", 1), entry("e2", "Round at the end.", 1)])
V2 = version(2, [entry("e1", "Check units before computing.", 1), entry("e2", "Round at the end.", 1),
                 entry("e3", "Sort dates ascending.", 2)])


def served(decisions: list[ReviewDecision], v: PlaybookVersion = V2) -> dict[str, str]:
    view = reviewed_view(v.playbook_id, v.version, v.entries, load_book(decisions))
    return {e.entry_id: e.content for e in view.entries}


def test_review_mode_is_per_playbook_and_off_by_default():
    assert not review_on("", "pb")
    assert review_on("pb, other", "pb") and not review_on("other", "pb")
    assert review_on("*", "anything")


def test_a_decision_id_is_a_function_of_the_record_and_a_tampered_one_is_refused():
    a, b = decide(V1, "approve", "e1"), decide(V1, "approve", "e1")
    assert a.decision_id == b.decision_id and a != decide(V1, "approve", "e1", minute=1)
    forged = a.model_dump(mode="json") | {"reviewer": "mallory@host"}
    with pytest.raises(ValidationError, match="decision_id"):
        ReviewDecision.model_validate(forged)
    assert ReviewDecision.from_json_bytes(a.to_json_bytes()) == a


def test_a_rejection_needs_a_note_and_an_edit_names_the_one_entry_it_updates():
    with pytest.raises(ValidationError, match="note"):
        decide(V1, "reject", "e1")
    with pytest.raises(ValidationError, match="exactly one entry"):
        decide(V1, "edit", "e1", "e2", content="New text.")
    with pytest.raises(ReviewInputError, match="no entry e9"):
        items_for(V1, ["e9"])
    with pytest.raises(ReviewInputError, match="^a rejection needs a note saying why"):
        make_decision(V1, "reject", ["e1"], reviewer="ana@host", decided_at=T0, note="  ")
    with pytest.raises(ReviewInputError, match="new content"):
        make_decision(V1, "edit", ["e1"], reviewer="ana@host", decided_at=T0)
    bulk = make_decision(V1, "approve", ["e2", "e1", "e2"], reviewer="ana@host", decided_at=T0)
    assert [item.entry_id for item in bulk.items] == ["e2", "e1"]


def test_only_approved_entries_are_served_and_an_edit_serves_the_reviewers_text():
    assert served([], V1) == {}
    decisions = [decide(V1, "approve", "e1"), decide(V1, "edit", "e2", content="Round only the final answer.")]
    view = reviewed_view("pb", 1, V1.entries, load_book(decisions))
    assert {e.entry_id: e.content for e in view.entries} == {"e1": "Check units first.",
                                                            "e2": "Round only the final answer."}
    assert [(edit.entry_id, edit.reviewer) for edit in view.edits] == [("e2", "ana@host")]
    rejected = served([decide(V1, "reject", "e1", note="too vague")], V1)
    assert rejected == {}


def test_a_changed_entry_keeps_its_approved_text_until_the_change_is_approved():
    approved_v1 = [decide(V1, "approve", "e1", "e2")]  # bulk
    assert served(approved_v1) == {"e1": "Check units first.", "e2": "Round at the end."}  # e3 withheld, e1 held
    view = reviewed_view("pb", 2, V2.entries, load_book(approved_v1))
    assert view.withheld == ["e3"] and view.held_back == ["e1"]
    rejected_change = [*approved_v1, decide(V2, "reject", "e1", note="worse", minute=1)]
    assert served(rejected_change)["e1"] == "Check units first."
    approved_change = [*rejected_change, decide(V2, "approve", "e1", "e3", minute=2)]
    assert served(approved_change) == {"e1": "Check units before computing.", "e2": "Round at the end.",
                                       "e3": "Sort dates ascending."}


def test_the_latest_decision_on_a_proposal_counts_and_a_resent_record_counts_once():
    approve, reject = decide(V2, "approve", "e3"), decide(V2, "reject", "e3", note="wrong", minute=1)
    assert served([approve, reject]) == {}
    assert served([reject, approve]) == {"e3": "Sort dates ascending."}
    book = load_book([approve, reject, approve])  # the re-sent approval is the same decision: it does not count again
    assert [d.decision_id for d in book.decisions["pb"]] == [approve.decision_id, reject.decision_id]


def test_statuses_inbox_and_rejection_rate():
    decisions = [decide(V1, "approve", "e1", "e2"), decide(V2, "reject", "e3", note="not a rule", minute=1)]
    state = review_state("pb", [V1, V2], V2, decisions)
    status = {(row.entry_id, row.content): row.status for row in state.proposals}
    assert status == {("e1", "Check units first."): "approved", ("e2", "Round at the end."): "approved",
                      ("e1", "Check units before computing."): "proposed", ("e3", "Sort dates ascending."): "rejected"}
    assert [row.entry_id for row in inbox(state.proposals)] == ["e1"]
    assert state.rejection_rate == pytest.approx(1 / 3)
    undecided = review_state("pb", [V1, V2], V2, [])
    assert undecided.rejection_rate is None
    superseded = {row.content: row.status for row in undecided.proposals}["Check units first."]
    assert superseded == "superseded"


def test_the_same_log_replays_byte_identically():
    decisions = [decide(V1, "approve", "e1", "e2"), decide(V2, "edit", "e3", content="Sort dates newest last.",
                                                           minute=1), decide(V2, "reject", "e1", note="no", minute=2)]
    wire = [d.to_json_bytes() for d in decisions]
    first = review_state("pb", [V1, V2], V2, decisions).to_json_bytes()
    again = review_state("pb", [V1, V2], V2, [ReviewDecision.from_json_bytes(b) for b in wire]).to_json_bytes()
    assert first == again
    assert review_state("pb", [V1, V2], V2, decisions[:2]).to_json_bytes() != first


def test_entry_changes_between_served_versions():
    changes = entry_changes(V1.entries, V2.entries)
    assert [(c.kind, c.entry_id) for c in changes] == [("changed", "e1"), ("added", "e3")]
    assert [(c.kind, c.entry_id) for c in entry_changes(V2.entries, V1.entries)] == [("changed", "e1"),
                                                                                    ("removed", "e3")]


ACTIONS = st.sampled_from(["approve", "reject", "edit"])


@st.composite
def review_logs(draw):
    """Two versions of up to 6 entries (some texts changed, some removed, some added) and decisions on them."""
    texts = ["Check units.", "Round last.", "Cite sources.", "Sort dates.", "Show steps.", "Quote errors."]
    first = [entry(f"e{i}", texts[i], 1) for i in range(draw(st.integers(1, 6)))]
    second = []
    for e in first:
        fate = draw(st.sampled_from(["same", "changed", "removed"]))
        if fate != "removed":
            second.append(e if fate == "same" else entry(e.entry_id, e.content + " Always.", 1))
    second += [entry(f"n{i}", f"New lesson {i}.", 2) for i in range(draw(st.integers(0, 3)))]
    v1, v2 = version(1, first), version(2, second)
    decisions = []
    for minute in range(draw(st.integers(0, 8))):
        v = draw(st.sampled_from([v for v in (v1, v2) if v.entries]))
        ids = draw(st.lists(st.sampled_from([e.entry_id for e in v.entries]), min_size=1, max_size=3, unique=True))
        action = draw(ACTIONS)
        ids = ids[:1] if action == "edit" else ids
        decisions.append(decide(v, action, *ids, note="because" if action == "reject" else "", minute=minute,
                                content=f"Edited {minute}." if action == "edit" else None))
    return v1, v2, decisions


@settings(max_examples=150, deadline=None)
@given(review_logs(), st.randoms(use_true_random=False))
def test_agents_get_only_approved_or_edited_texts_and_a_resent_record_changes_nothing(log, rng):
    v1, v2, decisions = log
    view = reviewed_view("pb", 2, v2.entries, load_book(decisions))
    approved = {(i.entry_id, i.section, d.edit.content if d.edit else i.content)
                for d in decisions if d.action != "reject" for i in d.items}
    assert {(e.entry_id, e.section, e.content) for e in view.entries} <= approved
    assert [e.entry_id for e in view.entries] == [e.entry_id for e in v2.entries
                                                  if e.entry_id not in view.withheld]
    resent = list(decisions)
    for d in decisions:  # a producer's retry: some records again, later in the log
        if rng.random() < 0.5:
            resent.insert(rng.randrange(resent.index(d) + 1, len(resent) + 1), d)
    assert review_state("pb", [v1, v2], v2, resent).to_json_bytes() == \
        review_state("pb", [v1, v2], v2, decisions).to_json_bytes()


def test_history_provenance_ranking_and_likely_pairs():
    from combee_core.models import Insight, Reflection
    from combee_core.playbook.meaning import LexicalJudge
    from combee_core.serve.review_context import closest_reflections, entry_history, likely_pairs, making_version

    v3 = version(3, [entry("e2", "Round at the end.", 1), entry("e3", "Sort dates ascending.", 2)])
    assert [(h.version, h.change) for h in entry_history([V1, V2, v3], "e1")] == [(1, "added"), (2, "changed"),
                                                                                  (3, "removed")]
    assert making_version([V1, V2, v3], V2.entries[0]) is V2
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=1,
                              insights=[Insight(section="general", content=text)], model="sim")
                   for i, text in enumerate(["Cite every source.", "Check units before computing."])]
    assert [n.reflection.reflection_id for n in closest_reflections("Check units before computing.", reflections,
                                                                    floor=0.0)] == ["r1", "r0"]
    served = [entry("s1", "Always sort the dates in ascending order before comparing them.", 1),
              entry("s2", "Check the units of every quantity before computing.", 1)]
    proposed = [entry("p1", "Always sort the dates in descending order before comparing them.", 2),
                entry("p2", "Check the units of every quantity before computing anything.", 2),
                entry("p3", "Cite the source of every figure.", 2)]
    pairs = {(p.entry_id, p.other_id): p.kind for p in likely_pairs(proposed, served, LexicalJudge())}
    assert pairs == {("p1", "s1"): "conflict", ("p2", "s2"): "same"}


def test_combee_serve_s_served_version_is_the_reviewed_one_and_a_decision_refreshes_it():
    from combee_core.settings import CombeeSettings
    from combee_core.topology import Topic
    from streams.broker.profile import BrokerProfile
    from streams.topology.follower import PlaybookFollower

    refreshed: list[str] = []
    follower = PlaybookFollower(CombeeSettings.load(review_playbooks="pb"), "", BrokerProfile.for_tansu(),
                                on_review=refreshed.append)  # no I/O: records handed in as the topics would
    follower.latest["pb"] = V2
    assert follower.served_reviewed("pb").entries == []
    approve = decide(V2, "approve", "e2", "e3")
    follower._take(Topic.REVIEW, approve.to_json_bytes())
    follower._take(Topic.REVIEW, approve.to_json_bytes())  # a re-sent record counts once
    assert refreshed == ["pb"]
    assert [e.entry_id for e in follower.served_reviewed("pb").entries] == ["e2", "e3"]
    assert len(follower.served("pb").entries) == 3  # the unreviewed version is unchanged
