"""A wording the judge matches to an entry by closeness alone, unconfirmed by the reducer call (a rewording, or a
reversal the judge cannot see), challenges the entry's text (issue 38, Build item 2; ``combee_core.playbook``
``operations`` and ``challenges``): it is folded (an alias, no counter raised), and its distinct traces accumulate
across versions in a pending challenge, which takes the entry's slot once it outweighs the entry's evidence; the
winner inherits the evidence it won with, and the entry's text and other aliases as its aliases. Before this, a
correction the judge called a paraphrase was folded for ever: restated in 3 batches it never superseded the rule it
corrects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from bench.naive_pipeline import DATA, learn, restated
from combee_core.models import AddOp, PlaybookEntry, PlaybookVersion
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.meaning import Judgement
from combee_core.playbook.uncertain import UncertainJudge
from tests.unit.embedders import naive_reducer

RULE = "Hard-code API keys in the config module for simplicity."
FIX = "Read API keys from environment variables rather than hard-coding them."  # "same" to RULE by closeness alone
FIX2 = "Take API keys from the environment, never from source files."  # FIX reworded: closer to FIX than to RULE
MID = "Keep API keys wherever the team finds them easiest to manage."  # as close to RULE as to FIX


class TableJudge:
    """Verdicts by table (symmetric): pair -> score of a "same" by closeness; other pairs distinct."""

    def __init__(self, same: dict[tuple[str, str], float]) -> None:
        self.same = {frozenset(p): s for p, s in same.items()}

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old:
            return Judgement("same", 1.0, "same text")
        if (score := self.same.get(frozenset((new, old)))) is not None:
            return Judgement("same", score, f"same meaning ({score:.2f})")
        return Judgement("distinct", 0.0, "distinct")


JUDGE = UncertainJudge.trusting(TableJudge({(RULE, FIX): 0.61, (FIX, FIX2): 0.8, (RULE, FIX2): 0.55,
                                            (RULE, MID): 0.7, (FIX, MID): 0.7}))


def _rule(helpful: int = 0, aliases: Sequence[str] = ()) -> Playbook:
    return Playbook.from_entries("pb", 1, [PlaybookEntry(entry_id="gen-00001", section="general", content=RULE,
                                                         helpful=helpful, created_version=1, updated_version=1,
                                                         aliases=list(aliases))])


def _batches(playbook: Playbook, texts: Sequence[str]) -> tuple[Playbook, list[str]]:
    reasons: list[str] = []
    for version, text in enumerate(texts, playbook.version + 1):
        result = apply_operations(playbook, [AddOp(section="general", content=text)], version, judge=JUDGE)
        playbook = result.playbook
        reasons += [a.reason for a in (*result.applied, *result.superseded)]
    return playbook, reasons


def test_an_unconfirmed_correction_restated_in_batches_supersedes_without_raising_the_rules_counters() -> None:
    playbook, reasons = _batches(_rule(helpful=1), [FIX])  # the rule's evidence 2; the correction: 1 trace
    [entry] = playbook.entries
    assert (entry.entry_id, entry.helpful, entry.aliases) == ("gen-00001", 1, [FIX])  # folded, no counter
    assert [(c.content, c.support) for c in playbook.challenges] == [(FIX, 1)]
    assert "challenge (support 1 distinct traces" in reasons[0]
    playbook, _ = _batches(playbook, [FIX])  # 2 traces: not above evidence 2
    assert playbook.get("gen-00001") is not None and playbook.get("gen-00001").helpful == 1  # type: ignore[union-attr]
    playbook, reasons = _batches(playbook, [FIX])  # 3 traces over 3 versions: outweighs
    [winner] = playbook.entries
    assert (winner.content, winner.helpful, winner.aliases) == (FIX, 2, [RULE])  # its evidence; RULE an alias
    assert playbook.challenges == ()
    assert reasons[0].startswith("added; supersedes gen-00001 (v1-v2, helpful 1") and "support 3" in reasons[0]
    assert reasons[1].startswith(f"superseded by {winner.entry_id}")


def test_a_rewording_of_the_challenger_adds_to_it_and_one_as_close_to_the_rule_does_not() -> None:
    playbook, _ = _batches(_rule(), [FIX, MID])
    assert sorted((c.content, c.support) for c in playbook.challenges) == sorted([(FIX, 1), (MID, 1)])
    assert playbook.get("gen-00001") is not None  # MID is no closer to FIX than to RULE: a challenge of its own
    playbook, reasons = _batches(_rule(), [FIX, FIX2])
    assert [e.content for e in playbook.entries] == [FIX2] and "support 2" in reasons[-2]


def test_the_old_wording_restated_is_the_winners_alias_and_never_takes_the_slot_back() -> None:
    playbook, _ = _batches(_rule(), [FIX, FIX])
    [winner] = playbook.entries
    assert (winner.content, winner.helpful, winner.aliases) == (FIX, 1, [RULE])  # evidence 2
    playbook, reasons = _batches(playbook, [RULE, RULE, RULE])  # once a challenge in turn: the slot swapped back
    assert [(e.content, e.helpful) for e in playbook.entries] == [(FIX, 1)] and playbook.challenges == ()
    assert all(f"restates {winner.entry_id}'s own wording" in reason for reason in reasons)


def test_the_winner_keeps_the_entrys_wordings_as_aliases() -> None:
    other = "Keep API keys in one place in the code."
    playbook, _ = _batches(_rule(aliases=[other]), [FIX, FIX])
    assert [(e.content, e.aliases) for e in playbook.entries] == [(FIX, [RULE, other])]


def test_an_unconfirmed_challenge_is_bounded_by_the_change_cap_and_folds_meanwhile() -> None:
    first = apply_operations(_rule(), [AddOp(section="general", content=FIX)], 2, judge=JUDGE).playbook
    capped = apply_operations(first, [AddOp(section="general", content=FIX)], 3, judge=JUDGE, max_changes=0)
    assert [e.entry_id for e in capped.playbook.entries] == ["gen-00001"]
    assert "change cap" in capped.applied[0].reason and capped.playbook.challenges[0].support == 2


def test_on_the_tuning_set_every_correction_restated_in_3_batches_supersedes_through_the_reducer() -> None:
    corrections = json.loads((DATA / "lessons_tuning.json").read_text())["corrections"]
    runs = [asyncio.run(restated(naive_reducer(), c["rule"], [c["correction"]] * 3)) for c in corrections]
    assert [(r["superseded"], r["reinforced"]) for r in runs] == [(True, False)] * len(corrections)


def test_an_unconfirmed_supersession_through_the_reducer_replays_byte_for_byte() -> None:
    rule = "Fix the bug first and add a test afterwards if there is time."
    fix = "Write a failing test that reproduces the bug before changing the code."

    async def chain() -> list[bytes]:
        playbook, record = await learn(naive_reducer(), Playbook.empty("replay"),
                                       [AddOp(section="rules", content=rule, support=2)], 1, 0)
        records = [record.to_json_bytes()]
        for batch in (1, 2, 3):  # each batch from the restored record alone, as a restarted reducer has it
            restored = PlaybookVersion.from_json_bytes(records[-1])
            playbook = Playbook.from_entries(restored.playbook_id, restored.version, restored.entries,
                                             restored.next_entry_number, restored.curation,
                                             baseline=restored.baseline, challenges=restored.challenges)
            playbook, record = await learn(naive_reducer(), playbook, [AddOp(section="rules", content=fix)], 1, batch)
            records.append(record.to_json_bytes())
        return records

    first, again = asyncio.run(chain()), asyncio.run(chain())
    assert first == again
    last = PlaybookVersion.from_json_bytes(first[-1])
    assert [e.content for e in last.entries] == [fix]  # superseded on the way (in the second batch)
    assert PlaybookVersion.from_json_bytes(first[1]).challenges[0].support == 1  # pending, in the version
