"""Contradictions settled by evidence and outcomes (``combee_core.playbook.challenges``): a correction's support
accumulates across versions as a pending challenge in the version, counted in distinct traces; it supersedes once
it outweighs the rule's restatements plus outcome credit; the winner keeps the slot; a restart rebuilds the same
challenges; where both sides were used enough, outcomes decide."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, OutcomeTally, PartialUpdate, PlaybookEntry, PlaybookVersion, TraceOutcome
from combee_core.playbook import Playbook
from combee_core.playbook.challenges import entry_evidence
from combee_core.playbook.meaning import Judgement
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ScanResult, build_version

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RULE = "Apply the discount after computing tax on invoice totals."
CORRECTIONS = ["Apply the discount before computing tax on invoice totals.",
               "Always apply the discount before computing tax on invoice totals.",
               "Apply the discount before you compute tax on invoice totals."]


def _rule(helpful: int, harmful: int = 0, outcome: OutcomeTally | None = None, content: str = RULE,
          entry_id: str = "inv-00001") -> PlaybookEntry:
    return PlaybookEntry(entry_id=entry_id, section="invoices", content=content, helpful=helpful, harmful=harmful,
                         outcome=outcome or OutcomeTally(), created_version=1, updated_version=1)


def _version(playbook: Playbook, adds: list[AddOp], traces: int, *, copies: int = 1,
             outcomes: list[TraceOutcome] | None = None) -> PlaybookVersion:
    """The next version of ``playbook`` from one partial of ``traces`` traces (``copies`` copies each)."""
    ids = [f"t{playbook.version}-{i}" for i in range(traces)]
    partial = PartialUpdate(playbook_id=playbook.playbook_id, batch_id=playbook.version, node=0, k=1,
                            base_version=playbook.version, operations=adds, trace_ids=ids,
                            reflection_ids=[f"r-{t}" for t in ids], outcomes=outcomes or [],
                            items_read=traces * copies, expected_items=traces * copies, batch_closed_at=NOW)
    scan = ScanResult(operations=adds, usage=partial.usage, levels=0, critical_path_s=0.0)
    return build_version(playbook, [partial], scan, published_at=NOW, change_share=0.25).record


def _restored(record: PlaybookVersion) -> Playbook:
    """The playbook a (re)started reducer builds the next version on, from the published record."""
    logs = ReducerLogs()
    logs.take_version(record)
    return logs.playbook(record.playbook_id)


def _chain(playbook: Playbook, batches: list[list[AddOp]], traces: int = 3) -> list[PlaybookVersion]:
    records = []
    for adds in batches:
        records.append(_version(playbook, adds, traces))
        playbook = _restored(records[-1])
    return records


def test_a_correction_restated_across_three_batches_supersedes_the_rule() -> None:
    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=6)])  # evidence 7: no single batch of 3 outweighs it
    records = _chain(playbook, [[AddOp(section="invoices", content=c, support=3)] for c in CORRECTIONS])
    first, second, third = records
    assert [e.content for e in first.entries] == [e.content for e in second.entries] == [RULE]
    assert [(c.entry_id, c.support) for c in first.challenges] == [("inv-00001", 3)]
    assert [(c.entry_id, c.support, c.first_version, c.last_version) for c in second.challenges] == [
        ("inv-00001", 6, 2, 3)]
    assert all(op.outcome == "rejected" and "challenge pending" in op.reason
               for op in [*first.operations, *second.operations])
    (winner,) = third.entries
    assert winner.content == CORRECTIONS[2] and winner.helpful == 8  # inherits the 9 traces it won with
    assert third.challenges == []
    add, delete = third.operations
    assert add.reason.startswith("added; supersedes inv-00001") and delete.entry_id == "inv-00001"
    assert "evidence 7" in delete.reason and "support 9 distinct traces" in delete.reason  # both sides recorded


def test_the_winner_keeps_the_slot_when_the_old_wording_is_restated_once_more() -> None:
    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=4)])
    records = _chain(playbook, [[AddOp(section="invoices", content=c, support=3)] for c in CORRECTIONS[:2]])
    winner = records[-1].entries[0]
    assert winner.content == CORRECTIONS[1]
    again = _version(_restored(records[-1]), [AddOp(section="invoices", content=RULE, support=3)], 3)
    assert [e.content for e in again.entries] == [CORRECTIONS[1]]
    assert again.entries[0].helpful == winner.helpful  # a contradiction adds to neither side
    (op,) = again.operations
    assert op.outcome == "rejected" and f"conflicts with {winner.entry_id}" in op.reason
    assert [(c.entry_id, c.content, c.support) for c in again.challenges] == [(winner.entry_id, RULE, 3)]


def test_a_restart_rebuilds_the_same_challenges() -> None:
    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=9)])
    batches = [[AddOp(section="invoices", content=c, support=2)] for c in CORRECTIONS * 2]
    restarted = _chain(playbook, batches)
    in_memory, current = [], playbook
    for adds in batches:  # never restored from a record: the value the reducer keeps while it runs
        ids = [f"t{current.version}-{i}" for i in range(3)]
        partial = PartialUpdate(playbook_id="pb", batch_id=current.version, node=0, k=1,
                                base_version=current.version, operations=adds, trace_ids=ids,
                                reflection_ids=[f"r-{t}" for t in ids], items_read=3, expected_items=3,
                                batch_closed_at=NOW)
        built = build_version(current, [partial], ScanResult(adds, partial.usage, 0, 0.0), published_at=NOW,
                              change_share=0.25)
        in_memory.append(built.record)
        current = built.playbook
    assert [r.content_hash for r in restarted] == [r.content_hash for r in in_memory]
    assert [r.to_json_bytes() for r in restarted] == [r.to_json_bytes() for r in in_memory]
    assert restarted[4].challenges[0].support == 10 and restarted[5].entries[0].content != RULE  # 10 vs 10, then 12


def test_a_declared_support_counts_as_the_distinct_traces_behind_it() -> None:
    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=4)])
    record = _version(playbook, [AddOp(section="invoices", content=CORRECTIONS[0], support=1_000_000)], 3,
                      copies=2)
    assert [e.content for e in record.entries] == [RULE]
    # the batch's 3 traces, however many copies: the reducer counts the declared copies in traces (copies / p) and
    # bounds them by the batch's distinct traces (combee_core.reduce.counts); the challenge counts those traces
    [challenge] = record.challenges
    assert challenge.support == 3


def test_copies_of_a_trace_count_once_toward_a_challenge() -> None:
    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=4)])
    record = _version(playbook, [AddOp(section="invoices", content=CORRECTIONS[0], support=4)], 10, copies=2)
    assert [c.support for c in record.challenges] == [2]  # 4 copies at p = 2: two traces


@settings(max_examples=60, deadline=None)
@given(helpful=st.integers(0, 12), harmful=st.integers(0, 12),
       supports=st.lists(st.tuples(st.sampled_from(CORRECTIONS), st.integers(1, 6)), min_size=1, max_size=6))
def test_no_correction_reinforces_the_rule_it_corrects(helpful: int, harmful: int,
                                                       supports: list[tuple[str, int]]) -> None:
    rule = _rule(helpful=helpful, harmful=harmful)
    playbook = Playbook.from_entries("pb", 1, [rule])
    for record in _chain(playbook, [[AddOp(section="invoices", content=c, support=s)] for c, s in supports]):
        kept = {e.entry_id: e for e in record.entries}.get(rule.entry_id)
        if kept is None:  # superseded: only by more distinct traces than the rule's evidence
            challenge_support = int(record.operations[-1].reason.split("support ")[-1].split(" ")[0])
            assert challenge_support > entry_evidence(rule)
            break
        assert (kept.helpful, kept.harmful) == (helpful, harmful)
        assert sum(c.support for c in record.challenges) <= 3 * record.version  # at most the batches' traces


def _used(successes: int, failures: int) -> OutcomeTally:
    return OutcomeTally(successes=successes * 1000, failures=failures * 1000)


def test_outcomes_decide_between_two_used_entries_over_restatements() -> None:
    ascending = PlaybookEntry(entry_id="sor-00001", section="sorting", helpful=30, created_version=1,
                              updated_version=1, content="Sort the results in ascending order of price.",
                              outcome=_used(4, 16))
    descending = PlaybookEntry(entry_id="sor-00002", section="sorting", helpful=0, created_version=1,
                               updated_version=1, content="Sort the results in descending order of price.",
                               outcome=_used(17, 3))
    playbook = Playbook.from_entries("pb", 1, [ascending, descending])
    record = _version(playbook, [AddOp(section="sorting", content="Sort results in ascending order of price.",
                                       support=3)], 3)
    assert [e.entry_id for e in record.entries] == ["sor-00002"]  # restated 33 times, but agents fail with it
    add, delete = record.operations
    assert "outcomes decide for sor-00002" in add.reason and delete.entry_id == "sor-00001"
    assert "outcome -0.27 ± 0.30 over 20.0 uses" in delete.reason  # both sides' outcome credit recorded
    assert "outcome +0.32 ± 0.30 over 20.0 uses" in delete.reason


def test_without_enough_uses_the_better_evidence_settles_two_entries() -> None:
    ascending = PlaybookEntry(entry_id="sor-00001", section="sorting", helpful=5, created_version=1,
                              updated_version=1, content="Sort the results in ascending order of price.")
    descending = PlaybookEntry(entry_id="sor-00002", section="sorting", helpful=0, created_version=1,
                               updated_version=1, content="Sort the results in descending order of price.")
    record = _version(Playbook.from_entries("pb", 1, [ascending, descending]),
                      [AddOp(section="sorting", content="Sort results in ascending order of price.", support=1)], 1)
    assert [e.entry_id for e in record.entries] == ["sor-00001"]
    assert "evidence decide for sor-00001" in record.operations[0].reason


def test_a_restatement_never_settles_a_pair_against_the_side_it_restates() -> None:
    # an established wrong rule (evidence 21) and a young correction entry beside it; an ADD restates the correction
    rule = PlaybookEntry(entry_id="bak-00001", section="backups", helpful=20, created_version=1, updated_version=1,
                         content="Run the nightly backup job before rotating the logs.")
    fix = PlaybookEntry(entry_id="bak-00002", section="backups", helpful=2, created_version=2, updated_version=2,
                        content="Run the nightly backup job after rotating the logs.")
    record = _version(Playbook.from_entries("pb", 2, [rule, fix]),
                      [AddOp(section="backups", content="Run the nightly backup job after rotating logs.")], 1)
    assert [e.entry_id for e in record.entries] == ["bak-00001", "bak-00002"]  # the restated side stays
    assert record.entries[1].helpful == 3 and "both kept" in record.operations[0].reason
    # a restatement of the rule may still settle the pair in the rule's favour
    record = _version(Playbook.from_entries("pb", 2, [rule, fix]),
                      [AddOp(section="backups", content="Run the nightly backup job before rotating logs.")], 1)
    assert [e.entry_id for e in record.entries] == ["bak-00001"]


def test_outcome_credit_counts_against_a_rule_agents_fail_with() -> None:
    baseline = OutcomeTally(successes=80_000, failures=20_000)  # the playbook's traces succeed 80% of the time
    failing = _rule(helpful=4, outcome=_used(2, 18))  # but 2 of 20 with this rule
    playbook = Playbook.from_entries("pb", 1, [failing], baseline=baseline)
    record = _version(playbook, [AddOp(section="invoices", content=CORRECTIONS[0], support=2)], 2)
    assert [e.content for e in record.entries] == [CORRECTIONS[0]]
    assert "outcome -0." in record.operations[-1].reason  # the incumbent's negative credit, recorded
    helped = _rule(helpful=4, outcome=_used(20, 0))
    record = _version(Playbook.from_entries("pb", 1, [helped], baseline=baseline),
                      [AddOp(section="invoices", content=CORRECTIONS[0], support=3)], 6)
    assert [e.content for e in record.entries] == [RULE]  # evidence 5 plus its credit outweighs 6 traces


class _EveryCorrectionConflicts:
    """A judge for which every other text contradicts RULE and distinct texts are distinct lessons."""

    def prepare(self, texts: object) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old:
            return Judgement("same", 1.0, "same text")
        if RULE in (new, old):
            return Judgement("conflict", 0.9, "stub")
        return Judgement("distinct", 0.0, "stub")


def test_an_entry_keeps_at_most_four_pending_corrections_and_says_which_one_a_fifth_replaced() -> None:
    from combee_core.playbook import apply_operations
    from combee_core.playbook.challenges import MAX_PER_ENTRY

    playbook = Playbook.from_entries("pb", 1, [_rule(helpful=20)])
    results = []
    for number, (name, support) in enumerate(zip(("north", "south", "east", "west", "centre"), (3, 1, 2, 2, 1),
                                                 strict=True)):
        add = AddOp(section="invoices", content=f"Apply the discount first in region {name}.", support=support)
        results.append(apply_operations(playbook, [add], number + 2, judge=_EveryCorrectionConflicts()))
        playbook = results[-1].playbook
    assert len(results[3].playbook.challenges) == MAX_PER_ENTRY == 4
    last = results[4]
    assert sorted(c.content.split()[-1] for c in last.playbook.challenges) == ["centre.", "east.", "north.", "west."]
    assert "replaced the weakest of inv-00001's pending corrections" in last.applied[0].reason
    assert "region south.', support 1" in last.applied[0].reason


def test_a_settled_pair_keeps_the_operation_invariants() -> None:
    from combee_core.playbook import apply_operations
    from tests.unit.test_playbook_curation import check_step

    ascending = PlaybookEntry(entry_id="sor-00001", section="sorting", helpful=5, created_version=1,
                              updated_version=1, content="Sort the results in ascending order of price.")
    descending = PlaybookEntry(entry_id="sor-00002", section="sorting", helpful=0, created_version=1,
                               updated_version=1, content="Sort the results in descending order of price.")
    before = Playbook.from_entries("pb", 1, [ascending, descending])
    add = AddOp(section="sorting", content="Sort results in ascending order of price.")
    result = apply_operations(before, [add], 2)
    assert [e.entry_id for e in result.playbook.entries] == ["sor-00001"]
    check_step(before, add, result.applied[0], result.playbook, 2)
