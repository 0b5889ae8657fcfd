"""Demotion by outcomes (``combee_core.reduce.demotion``, through ``build_version`` as the reducer runs it): an entry
whose agents do measurably worse than the playbook's baseline is removed with its evidence, within the change cap
and the rolling budget (flagged past them); noise, few uses and entries at the baseline are left alone; the decision
replays byte for byte. And eviction under the size budget goes by outcome credit first, never oldest-first."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from combee_core.models import OutcomeTally, PartialUpdate, PlaybookEntry, TraceOutcome, Usage
from combee_core.playbook import Playbook, playbook_tokens
from combee_core.playbook.outcomes import worse_than_baseline
from combee_core.reduce.budget import fit_to_budget
from combee_core.reduce.processor import ReducerConfig
from combee_core.reduce.reduction import NewVersion, ScanResult, build_version
from combee_core.settings import CombeeSettings
from tests.unit.playbook_support import PROPERTY

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BASELINE = OutcomeTally(successes=160_000, failures=40_000)  # 200 traces, 80% success
WRONG = OutcomeTally(successes=1_000, failures=11_000)  # 12 uses, 1 success
AT_BASELINE = OutcomeTally(successes=32_000, failures=8_000)
SOMEWHAT_WORSE = OutcomeTally(successes=7_000, failures=5_000)  # 58% over 12 uses: 1.7 sd below, not 3
FEW_USES = OutcomeTally(successes=0, failures=8_000)


UNUSED = OutcomeTally()


def _entry(n: int, outcome: OutcomeTally = UNUSED, created: int = 1) -> PlaybookEntry:
    return PlaybookEntry(entry_id=f"gen-{n:05d}", section="general", content=f"Rule number {n} about column {n}. " * 3,
                         created_version=created, updated_version=created, outcome=outcome)


def _playbook(*outcomes: OutcomeTally, version: int = 3) -> Playbook:
    return Playbook.from_entries("pb", version, [_entry(n, o) for n, o in enumerate(outcomes, 1)], baseline=BASELINE)


def _partial(playbook: Playbook, outcomes: list[TraceOutcome] | None = None) -> PartialUpdate:
    outcomes = outcomes or []
    return PartialUpdate(playbook_id="pb", batch_id=playbook.version, node=0, k=1, base_version=playbook.version,
                         operations=[], trace_ids=[o.trace_id for o in outcomes] or ["t0"], outcomes=outcomes,
                         items_read=1, expected_items=1, batch_closed_at=NOW)


def _version(playbook: Playbook, **options: object) -> NewVersion:
    return build_version(playbook, [_partial(playbook)], ScanResult([], Usage(), 0, 0.0), published_at=NOW,
                         **options)  # type: ignore[arg-type]


def _demoted(new: NewVersion) -> list[str]:
    return [a.entry_id or "" for a in new.record.operations if a.reason.startswith("demoted by outcomes")]


def test_an_entry_whose_agents_fail_far_more_often_than_the_baseline_is_removed_with_its_evidence() -> None:
    playbook = _playbook(WRONG, AT_BASELINE, SOMEWHAT_WORSE, FEW_USES)
    new = _version(playbook)
    assert _demoted(new) == ["gen-00001"]
    assert [e.entry_id for e in new.record.entries] == ["gen-00002", "gen-00003", "gen-00004"]
    [removal] = [a for a in new.record.operations if a.entry_id == "gen-00001"]
    assert removal.operation.op == "DELETE" and removal.outcome == "applied"
    assert "over 11.9 uses (baseline 0.80)" in removal.reason and "more than 3 sd from 10 uses" in removal.reason
    assert not new.warnings
    # the same version replays byte for byte
    assert _version(playbook).record.model_dump_json() == new.record.model_dump_json()
    # off: kept
    assert _demoted(_version(playbook, demotion_sd=None)) == []


def test_the_stage_configuration_demotes_at_three_sd_by_default_and_zero_turns_it_off() -> None:
    assert ReducerConfig.from_settings(CombeeSettings.load({})).demotion_sd == 3.0
    assert ReducerConfig.from_settings(CombeeSettings.load({"COMBEE_PLAYBOOK_DEMOTION_SD": "0"})).demotion_sd is None


def test_demotion_follows_the_outcomes_this_batch_brings() -> None:
    """An entry with no outcome yet: the batch's 12 traces that used it all failed, against 80% for the rest."""
    playbook = _playbook(OutcomeTally(), OutcomeTally())
    failed = [TraceOutcome(trace_id=f"t{n:02d}", ran_version=3, success=0, used=["gen-00001"]) for n in range(12)]
    new = build_version(playbook, [_partial(playbook, failed)], ScanResult([], Usage(), 0, 0.0), published_at=NOW)
    assert _demoted(new) == ["gen-00001"]


def test_demotions_share_the_change_cap_the_furthest_below_first_and_the_rest_are_flagged() -> None:
    worse = [OutcomeTally(successes=s * 1000, failures=(20 - s) * 1000) for s in (3, 0, 2, 1)]
    playbook = _playbook(*worse, *[AT_BASELINE] * 4)  # 8 entries, cap 2 at 0.25
    new = _version(playbook, change_share=0.25)
    assert _demoted(new) == ["gen-00002", "gen-00004"]  # 0 and 1 successes of 20
    [warning] = new.warnings
    assert warning.startswith("demotion: 2 entr(ies) of v3 measurably worse than the baseline (gen-00003, gen-00001)")
    # and the budget's evictions get no more of the cap
    budgeted = _version(playbook, change_share=0.25, budget_tokens=playbook_tokens(playbook) // 2)
    gone = {e.entry_id for e in playbook.entries} - {e.entry_id for e in budgeted.record.entries}
    assert gone == {"gen-00002", "gen-00004"}


def test_demotions_count_against_the_rolling_budget() -> None:
    playbook = _playbook(WRONG, WRONG, *[AT_BASELINE] * 8)
    new = _version(playbook, rolling_share=0.1)  # one of 10 over the window
    assert len(_demoted(new)) == 1 and new.warnings[0].startswith("demotion: 1 entr(ies)")
    assert [c.entry_id for c in new.record.curation.recent_changes[-1].changed] == _demoted(new)


tallies = st.builds(lambda s, f: OutcomeTally(successes=s, failures=f), st.integers(0, 60_000), st.integers(0, 60_000))


@PROPERTY
@given(st.lists(tallies, min_size=1, max_size=12), tallies, st.sampled_from([None, 0.1, 0.25, 1.0]))
def test_property_only_measurably_worse_entries_go_and_never_more_than_the_cap(outcomes, baseline, share) -> None:
    playbook = Playbook.from_entries("pb", 3, [_entry(n, o) for n, o in enumerate(outcomes, 1)], baseline=baseline)
    new = _version(playbook, change_share=share)
    before = {e.entry_id: e for e in playbook.entries}
    for entry_id in _demoted(new):
        decayed = OutcomeTally(successes=before[entry_id].outcome.successes * 99 // 100,
                               failures=before[entry_id].outcome.failures * 99 // 100)
        base = OutcomeTally(successes=baseline.successes * 99 // 100, failures=baseline.failures * 99 // 100)
        assert worse_than_baseline(decayed, base, 10, Fraction(3)) is not None
    if share is not None:
        assert len(_demoted(new)) <= max(1, int(share * len(outcomes)))
    assert len(_demoted(new)) <= len(outcomes) // 2  # never a majority


def test_eviction_goes_by_outcome_credit_first_and_is_never_oldest_first() -> None:
    """Over budget by one entry: the entry agents fail with goes before an unproven one, although it is newer; among
    entries no evidence tells apart, the newest goes, not the oldest."""
    failing = OutcomeTally(successes=4_000, failures=8_000)  # 33% over 12 uses: not 3 sd below, still below
    entries = [_entry(1, created=1), _entry(2, created=3), _entry(3, failing, created=2), _entry(4, created=2)]
    playbook = Playbook.from_entries("pb", 3, entries, baseline=BASELINE)
    one_less = playbook_tokens(Playbook.from_entries("pb", 3, entries[1:]))
    assert [a.entry_id for a in fit_to_budget(playbook, one_less).evictions] == ["gen-00003"]
    two_less = playbook_tokens(Playbook.from_entries("pb", 3, entries[2:]))
    assert [a.entry_id for a in fit_to_budget(playbook, two_less).evictions] == ["gen-00003", "gen-00002"]
