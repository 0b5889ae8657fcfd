"""Everything replays byte-identically, the challenge and outcome-credit state included (issue 38, Done when): a
reducer restarted at any version (the playbook rebuilt from the published record alone, ``ReducerLogs``) builds the
same next versions, byte for byte, as one that kept its playbook in memory, while pending challenges accumulate
support across versions, the baseline and every entry's outcome counts decay and grow, and outcome credit decides a
supersession. ``test_challenges`` restarts a chain without outcomes and ``test_outcomes`` checks one version's
order-independence; this is the chain with both."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import (
    AddOp,
    Operation,
    OutcomeTally,
    PartialUpdate,
    PlaybookEntry,
    PlaybookVersion,
    TraceOutcome,
)
from combee_core.playbook import Playbook
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import NewVersion, ScanResult, build_version

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RULE = "Apply the discount after computing tax on invoice totals."
OTHER = "Quote every invoice total in the customer's currency."
CORRECTIONS = ["Apply the discount before computing tax on invoice totals.",
               "Always apply the discount before computing tax on invoice totals."]

Trace = tuple[bool, bool, bool]  # succeeded, used the rule, used the other entry
Batch = tuple[list[Trace], int | None, int]  # traces, the correction restated (index) or None, its support


def _start() -> Playbook:
    entries = [PlaybookEntry(entry_id="inv-00001", section="invoices", content=RULE, helpful=3, created_version=1,
                             updated_version=1),
               PlaybookEntry(entry_id="inv-00002", section="invoices", content=OTHER, helpful=1, created_version=1,
                             updated_version=1)]
    return Playbook.from_entries("pb", 1, entries, baseline=OutcomeTally(successes=40_000, failures=10_000))


def _build(playbook: Playbook, batch: Batch) -> NewVersion:
    traces, correction, support = batch
    ids = [f"t{playbook.version}-{i}" for i in range(len(traces))]
    outcomes = [TraceOutcome(trace_id=trace_id, ran_version=playbook.version, success=1000 if ok else 0,
                             used=[e for e, used in (("inv-00001", rule), ("inv-00002", other)) if used])
                for trace_id, (ok, rule, other) in zip(ids, traces, strict=True)]
    adds: list[Operation] = [] if correction is None else [
        AddOp(section="invoices", content=CORRECTIONS[correction], support=support)]
    partial = PartialUpdate(playbook_id="pb", batch_id=playbook.version, node=0, k=1, base_version=playbook.version,
                            operations=adds, trace_ids=ids, reflection_ids=[f"r-{t}" for t in ids],
                            outcomes=outcomes, items_read=len(ids), expected_items=len(ids), batch_closed_at=NOW)
    return build_version(playbook, [partial], ScanResult(adds, partial.usage, 0, 0.0), published_at=NOW,
                         change_share=0.25)


def _restarted(batches: list[Batch]) -> list[bytes]:
    """Each version built on the playbook a restarted reducer rebuilds from the previous record's bytes alone."""
    records, playbook = [], _start()
    for batch in batches:
        records.append(_build(playbook, batch).record.to_json_bytes())
        logs = ReducerLogs()
        logs.take_version(PlaybookVersion.from_json_bytes(records[-1]))
        playbook = logs.playbook("pb")
    return records


def _in_memory(batches: list[Batch]) -> list[bytes]:
    records, playbook = [], _start()
    for batch in batches:
        built = _build(playbook, batch)
        records.append(built.record.to_json_bytes())
        playbook = built.playbook
    return records


FAILING_RULE: list[Batch] = [([(False, True, False), (False, True, False), (True, False, True)], 0, 1),
                             ([(False, True, False), (True, False, True), (True, False, False)], None, 1),
                             ([(False, True, False), (False, True, True), (True, False, True)], 1, 1),
                             ([(True, False, True), (False, True, False)], 0, 1)]


def test_a_restarted_reducer_rebuilds_challenges_and_outcome_credit_byte_for_byte() -> None:
    restarted = _restarted(FAILING_RULE)
    assert restarted == _in_memory(FAILING_RULE) == _restarted(FAILING_RULE)
    versions = [PlaybookVersion.from_json_bytes(record) for record in restarted]
    # the state is there to replay: a challenge pending with support from two versions, counts decayed and grown
    assert [(c.content, c.support, c.first_version, c.last_version) for c in versions[2].challenges] == [
        (CORRECTIONS[0], 2, 2, 4)]
    rule = versions[2].entries[0]  # failures: (2 x 0.99 + 1) x 0.99 + 2 traces, in thousandths, rounded down
    assert rule.content == RULE and (rule.outcome.successes, rule.outcome.failures) == (0, 4_950)
    assert versions[2].baseline.successes % 1000 != 0  # decayed every version, in thousandths
    # and outcome credit takes part in the decision: the rule's agents fail, so 3 restatements supersede it
    superseded = [a for a in versions[3].operations if a.operation.op == "DELETE"]
    assert [e.content for e in versions[3].entries] == [OTHER, CORRECTIONS[0]]
    assert superseded and "outcome -0." in superseded[0].reason


TRACES = st.tuples(st.booleans(), st.booleans(), st.booleans())
BATCHES = st.tuples(st.lists(TRACES, min_size=1, max_size=4), st.one_of(st.none(), st.sampled_from([0, 1])),
                    st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(st.lists(BATCHES, min_size=1, max_size=5))
def test_a_restart_at_any_version_builds_the_versions_a_running_reducer_builds(batches: list[Batch]) -> None:
    assert _restarted(batches) == _in_memory(batches)
