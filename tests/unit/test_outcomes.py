"""Outcome credit per entry (``combee_core.playbook.outcomes``): from the traces' success or score and their
``used_entries``, counted once per trace, decayed per version, kept in the version, replayed byte for byte."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.aggregate.processor import Aggregator, AggregatorConfig
from combee_core.aggregate.windows import ReadyWindow
from combee_core.models import (
    MergeOp,
    OutcomeTally,
    PartialUpdate,
    PlaybookEntry,
    PlaybookVersion,
    Reflection,
    ShuffledReflection,
    Trace,
    TraceOutcome,
    Usage,
)
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.outcomes import credit, decayed, distinct_outcomes, trace_outcome, with_outcomes
from combee_core.reduce.reduction import ScanResult, build_version

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _trace(trace_id: str = "t1", success: bool | None = None, score: float | None = None,
           version: int = 3) -> Trace:
    return Trace(trace_id=trace_id, playbook_id="pb", playbook_version=version, agent_id="a", task_id="x",
                 input="in", output="out", success=success, score=score, created_at=NOW)


def _entry(entry_id: str, created: int = 1, outcome: OutcomeTally | None = None) -> PlaybookEntry:
    return PlaybookEntry(entry_id=entry_id, section="general", content=f"Rule {entry_id}.", created_version=created,
                         updated_version=created, outcome=outcome or OutcomeTally())


def _outcome(trace_id: str, success: bool, used: list[str], ran: int = 3) -> TraceOutcome:
    return TraceOutcome(trace_id=trace_id, ran_version=ran, success=1000 if success else 0, used=used)


def _partial(node: int, outcomes: list[TraceOutcome]) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=3, node=node, k=2, base_version=3, operations=[],
                         trace_ids=sorted({o.trace_id for o in outcomes}), outcomes=outcomes, items_read=1,
                         expected_items=1, batch_closed_at=NOW)


def _record(playbook: Playbook, partials: list[PartialUpdate]) -> PlaybookVersion:
    return build_version(playbook, partials, ScanResult([], Usage(), 0, 0.0), published_at=NOW).record


def test_a_trace_outcome_comes_from_its_success_or_its_score() -> None:
    assert trace_outcome(_trace(success=True), ["gen-00002", "gen-00001", "gen-00002"]) == TraceOutcome(
        trace_id="t1", ran_version=3, success=1000, used=["gen-00001", "gen-00002"])
    assert trace_outcome(_trace(success=False, score=0.9), []).success == 0  # success, when given, decides
    assert trace_outcome(_trace(score=0.8766), []).success == 877
    assert trace_outcome(_trace(score=7.0), []) is None  # a score outside [0, 1] says nothing comparable
    assert trace_outcome(_trace(), ["gen-00001"]) is None
    assert trace_outcome(_trace(success=True), ["x" * 129]).used == []  # no entry has such an id


def test_the_copies_of_a_trace_count_once_and_unused_traces_count_toward_the_baseline_only() -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry("gen-00001"), _entry("gen-00002")])
    used = _outcome("t1", True, ["gen-00001"])
    record = _record(playbook, [_partial(0, [used, _outcome("t2", False, [])]), _partial(1, [used])])
    assert record.baseline == OutcomeTally(successes=1000, failures=1000)
    assert [e.outcome for e in record.entries] == [OutcomeTally(successes=1000), OutcomeTally()]
    assert all(e.updated_version == 1 for e in record.entries)  # credit is not a change to the entry


def test_an_entry_created_after_the_version_a_trace_ran_gets_no_credit_from_it() -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry("gen-00001", created=3)])
    record = _record(playbook, [_partial(0, [_outcome("t1", True, ["gen-00001", "gen-00009"], ran=2)])])
    assert record.entries[0].outcome == OutcomeTally()
    assert record.baseline == OutcomeTally(successes=1000)


def test_counts_decay_each_version_in_integers() -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry("gen-00001", outcome=OutcomeTally(successes=1234, failures=7))],
                                     baseline=OutcomeTally(successes=10_000, failures=1))
    record = _record(playbook, [_partial(0, [])])
    assert record.entries[0].outcome == OutcomeTally(successes=1221, failures=6)  # x 99/100, rounded down
    assert record.baseline == OutcomeTally(successes=9900, failures=0)
    assert decayed(OutcomeTally(successes=1000), Fraction(1, 2)) == OutcomeTally(successes=500)


@settings(max_examples=40, deadline=None)
@given(results=st.lists(st.tuples(st.integers(0, 1000), st.lists(st.sampled_from(["gen-00001", "gen-00002"]),
                                                                  max_size=2, unique=True)), max_size=12),
       seed=st.randoms(use_true_random=False))
def test_the_version_does_not_depend_on_the_order_traces_or_partials_arrive_in(results, seed) -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry("gen-00001"), _entry("gen-00002")],
                                     baseline=OutcomeTally(successes=3333, failures=777))
    outcomes = [TraceOutcome(trace_id=f"t{i}", ran_version=3, success=s, used=sorted(u))
                for i, (s, u) in enumerate(results)]
    half = len(outcomes) // 2
    first = _record(playbook, [_partial(0, outcomes[:half]), _partial(1, outcomes[half:])])
    shuffled = seed.sample(outcomes, len(outcomes))
    second = _record(playbook, [_partial(0, shuffled), _partial(1, shuffled[:3])])  # copies in both partials
    assert first.to_json_bytes() == second.to_json_bytes()
    assert first.baseline.successes == 3333 * 99 // 100 + sum(s for s, _ in results)


def test_credit_compares_success_when_used_with_the_baseline() -> None:
    baseline = OutcomeTally(successes=70_000, failures=30_000)
    good = credit(OutcomeTally(successes=19_000, failures=1_000), baseline)
    assert good.effect > 0 and good.excess > 0 and good.uses == 20
    assert good.describe() == "+0.21 ± 0.08 over 20.0 uses (baseline 0.70)"
    assert credit(OutcomeTally(successes=2_000, failures=18_000), baseline).excess < 0
    assert credit(OutcomeTally(), baseline).describe() == "unused" and credit(OutcomeTally(), baseline).excess == 0


def test_a_merge_keeps_the_outcomes_of_every_entry_merged() -> None:
    playbook = Playbook.from_entries("pb", 1, [_entry("gen-00001", outcome=OutcomeTally(successes=2000)),
                                               _entry("gen-00002", outcome=OutcomeTally(failures=1000))])
    result = apply_operations(playbook, [MergeOp(entry_ids=["gen-00001", "gen-00002"], content="Both.")], 2)
    assert result.playbook.entries[0].outcome == OutcomeTally(successes=2000, failures=1000)


def test_with_outcomes_counts_each_distinct_trace() -> None:
    outcomes = distinct_outcomes([_outcome("b", True, []), _outcome("a", False, []), _outcome("b", True, [])])
    assert [o.trace_id for o in outcomes] == ["a", "b"]
    after = with_outcomes(Playbook.empty("pb"), outcomes)
    assert after.baseline == OutcomeTally(successes=1000, failures=1000)


def test_the_aggregator_carries_each_trace_outcome_once_into_its_partial() -> None:
    outcome = _outcome("t1", True, ["gen-00001"])

    def copy(replica: int, trace_id: str, with_outcome: TraceOutcome | None) -> ShuffledReflection:
        reflection = Reflection(reflection_id=f"r-{trace_id}", trace_id=trace_id, playbook_id="pb", seen_version=3,
                                insights=[], model="m", outcome=with_outcome)
        return ShuffledReflection(playbook_id="pb", batch_id=3, subgroup=0, replica=replica, expected_count=3, k=1,
                                  p=2, batch_size=2, base_version=3, position=replica, batch_closed_at=NOW,
                                  reflection=reflection)

    class Answer:
        operations: list = []
        usage = Usage()
        latency_s = 0.0

    async def role(reflections, context):
        return Answer()

    async def context(playbook_id, version):
        return ""

    copies = [copy(0, "t1", outcome), copy(1, "t1", outcome), copy(0, "t2", None)]
    ready = ReadyWindow(key=("pb", 3, 0), copies=copies, expected_count=3, closed_by="complete")
    effects = asyncio.run(Aggregator(AggregatorConfig(model="m")).aggregate(ready, role, context))
    (partial,) = [e.value for e in effects if isinstance(getattr(e, "value", None), PartialUpdate)]
    assert partial.outcomes == [outcome]


def test_the_reflector_role_takes_the_outcome_from_the_trace_not_from_the_model() -> None:
    from combee_core.llm.config import LLMConfig, RoleConfig
    from combee_core.llm.roles import LLMRoles

    fast = RoleConfig(backoff_s=0.001)
    trace = _trace(success=True).model_copy(update={"metadata": {"used_entries": "gen-00002, pb/gen-00001, other/x"}})
    reflection = asyncio.run(LLMRoles(LLMConfig(reflector=fast, aggregator=fast, reducer=fast)).reflect(trace))
    assert reflection.outcome == TraceOutcome(trace_id="t1", ran_version=3, success=1000,
                                              used=["gen-00001", "gen-00002"])  # another scope's entry left out


def test_an_import_keeps_the_outcome_counts_and_pending_corrections_of_the_text_it_keeps() -> None:
    from combee_core.models import Challenge
    from combee_core.runs.seed import seed_version

    used = _entry("gen-00001", outcome=OutcomeTally(successes=5000, failures=1000))
    pending = Challenge(entry_id="gen-00001", entry_content=used.content, section="general", content="Never.",
                        support=2, first_version=1, last_version=1)
    first = seed_version("pb", [used, _entry("gen-00002")], None, target_batch_size=40, now=NOW).version
    parent = first.model_copy(update={"entries": [used, *first.entries[1:]], "challenges": [pending],
                                      "baseline": OutcomeTally(successes=9000)})
    bare = [e.model_copy(update={"outcome": OutcomeTally()}) for e in parent.entries]  # as ACE text reads them
    second = seed_version("pb", bare, parent, target_batch_size=40, now=NOW).version
    assert second.entries[0].outcome == used.outcome and second.baseline == parent.baseline
    assert second.challenges == [pending]
    rewritten = [bare[0].model_copy(update={"content": "Rule rewritten."}), bare[1]]
    third = seed_version("pb", rewritten, parent, target_batch_size=40, now=NOW).version
    assert third.entries[0].outcome == OutcomeTally() and third.challenges == []  # new text: counts start afresh
