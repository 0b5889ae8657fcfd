"""A rule removed as wrong is succeeded by its strongest pending correction (``combee_core.playbook.succession``):
demoted by outcomes (through ``build_version``) or deleted by a DELETE, the correction held back only by it enters with
the evidence it accumulated, recorded as an ADD with its reason, and replays byte for byte; not when an entry already
states it, and not on a budget eviction."""

from __future__ import annotations

from datetime import UTC, datetime

from combee_core.models import Challenge, DeleteOp, OutcomeTally, PartialUpdate, PlaybookEntry, Usage
from combee_core.playbook import Playbook, apply_operations
from combee_core.reduce.reduction import NewVersion, ScanResult, build_version

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BASELINE = OutcomeTally(successes=160_000, failures=40_000)  # 200 traces, 80% success
WRONG = OutcomeTally(successes=1_000, failures=11_000)  # 12 uses, 1 success: far below the baseline
RULE = "Water the tomato seedlings every morning with cold tap water."
TEXTS = [RULE, "Label every seed tray with the sowing date and the variety.",
         "Keep the greenhouse vents open on days above twenty degrees.",
         "Compost the pruned leaves only when they show no blight spots."]
STRONG = "Water the tomato seedlings every morning with water left to reach room temperature."
WEAK = "Tomato seedlings want lukewarm water, never water straight from the cold tap."


def _playbook(challenges: list[Challenge], outcome: OutcomeTally = WRONG) -> Playbook:
    entries = [PlaybookEntry(entry_id=f"gar-{n:05d}", section="garden", content=text, helpful=0 if n == 1 else 3,
                             created_version=1, updated_version=1, outcome=outcome if n == 1 else OutcomeTally())
               for n, text in enumerate(TEXTS, 1)]
    return Playbook.from_entries("pb", 3, entries, baseline=BASELINE, challenges=challenges)


def _challenge(content: str, support: int, first: int = 2) -> Challenge:
    return Challenge(entry_id="gar-00001", entry_content=RULE, section="garden", content=content, support=support,
                     first_version=first, last_version=3, why="the water's temperature flipped")


def _version(playbook: Playbook, **options: object) -> NewVersion:
    partial = PartialUpdate(playbook_id="pb", batch_id=playbook.version, node=0, k=1, base_version=playbook.version,
                            operations=[], trace_ids=["t0"], items_read=1, expected_items=1, batch_closed_at=NOW)
    return build_version(playbook, [partial], ScanResult([], Usage(), 0, 0.0), published_at=NOW,
                         **options)  # type: ignore[arg-type]


def test_a_demoted_rule_is_succeeded_by_its_strongest_pending_correction_with_its_evidence() -> None:
    playbook = _playbook([_challenge(WEAK, 2, first=1), _challenge(STRONG, 4)])
    new = _version(playbook)
    assert RULE not in [e.content for e in new.record.entries]
    [heir] = [e for e in new.record.entries if e.content == STRONG]
    assert (heir.helpful, heir.harmful, heir.created_version) == (3, 0, 4)  # support 4, its creation counting one
    [record] = [a for a in new.record.operations if a.operation.op == "ADD"]
    assert record.entry_id == heir.entry_id and "gar-00001, which was demoted by outcomes" in record.reason
    assert new.record.challenges == []  # the weaker correction ends with the rule
    assert _version(playbook).record.model_dump_json() == new.record.model_dump_json()  # replays byte for byte


def test_no_heir_when_an_entry_already_states_the_correction_or_the_rule_stays() -> None:
    stated = _playbook([_challenge(TEXTS[2], 4)])  # pending, but another entry holds that text
    assert len(_version(stated).record.entries) == 3
    kept = _version(_playbook([_challenge(STRONG, 4)], outcome=OutcomeTally()))  # not demoted: still pending
    assert [e.content for e in kept.record.entries] == TEXTS and len(kept.record.challenges) == 1


def test_a_deleted_rule_is_succeeded_and_an_evicted_one_is_not() -> None:
    playbook = _playbook([_challenge(STRONG, 5)], outcome=OutcomeTally())
    result = apply_operations(playbook, [DeleteOp(entry_id="gar-00001")], 4)
    assert [e.content for e in result.playbook.entries][-1] == STRONG and result.playbook.challenges == ()
    assert result.playbook.entries[-1].helpful == 4 and "enters as gar-00005" in result.applied[0].reason
    [record] = result.succeeded
    assert record.operation.op == "ADD" and "deleted by the reducer's DELETE" in record.reason
    evicted = _version(playbook, budget_tokens=40, change_share=1.0)
    assert STRONG not in [e.content for e in evicted.record.entries]
