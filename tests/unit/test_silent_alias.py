"""After a reducer call, a lesson is an entry's only by the judge's verdict on the entry's own text or by the call's
answer, never through an alias (``combee_core.playbook.uncertain``, issue 38 item 6: no reducer answer makes
curation worse than the judge alone).

An alias is a wording folded into an entry on a match no one confirmed. Before this, after a call that said nothing,
a later ADD the judge calls *distinct* from the entry's text but the same as one of its aliases was folded into the
entry, raising nothing and opening no challenge. When the alias was another lesson's wording (folded at the
threshold, or the text of an entry an unconfirmed challenge superseded), every later wording of that lesson was
folded the same way: the lesson never had an entry again. On the honest benchmark (C = 12, seed 1) the silent
stand-ins lost one family for the whole run so (held-out 0.920 against 0.950 for the judge alone). The judge alone
would have given the lesson its entry as soon as a wording was distinct from the other entry's text."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, Usage
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.embedding import EmbeddingCache, StaticEmbedder
from combee_core.playbook.meaning import Judgement, SemanticJudge
from combee_core.playbook.uncertain import UncertainJudge
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OTHER_RULE = "For date ranges, treat an empty cell as missing, not zero."
LEAP = "For leap years, treat the final date as part of the range."  # folded into OTHER_RULE at the threshold
LEAP2 = "For leap years, count the end date as included."  # LEAP's lesson: close to LEAP, not to OTHER_RULE


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
        return Judgement("distinct", 0.1, "meaning 0.10 < 0.5")


TABLE = TableJudge({(LEAP, OTHER_RULE): 0.51, (LEAP2, LEAP): 0.8})


def _holding_an_alias() -> Playbook:
    entry = PlaybookEntry(entry_id="for-00001", section="formatting", content=OTHER_RULE, helpful=6,
                          created_version=1, updated_version=1, aliases=[LEAP])
    return Playbook.from_entries("pb", 1, [entry])


def test_after_a_call_a_wording_only_an_alias_links_to_an_entry_is_a_lesson_of_its_own() -> None:
    playbook = _holding_an_alias()
    judge = UncertainJudge.trusting(TABLE, matches_aliases=False)
    result = apply_operations(playbook, [AddOp(section="units", content=LEAP2, support=3)], 2, judge=judge)
    assert sorted(e.content for e in result.playbook.entries) == sorted([OTHER_RULE, LEAP2])
    assert result.playbook.get("for-00001") == playbook.get("for-00001")  # nothing of it changed, no alias added
    assert result.applied[0].reason == "added" and result.playbook.challenges == ()


def test_the_entrys_own_text_still_decides_and_raises_no_counter() -> None:
    judge = UncertainJudge.trusting(TABLE, matches_aliases=False)
    result = apply_operations(_holding_an_alias(), [AddOp(section="units", content=LEAP, support=1)], 2, judge=judge)
    [entry] = result.playbook.entries  # LEAP is the entry's lesson by the judge's verdict on its text (0.51)
    assert (entry.content, entry.helpful) == (OTHER_RULE, 6) and result.applied[0].reason.startswith("folded")


# Through the reducer stage's processor, a real reducer model that says nothing (an echo), the static embedder;
# wordings of one lesson of bench/data/lessons_dev.json: SECOND is close to FIRST, THIRD to SECOND but not to FIRST.
FIRST = "Convert amounts to a single currency before summing them."
SECOND = "Sum money only once every amount is in the same currency."
THIRD = "Before totalling payments, express them all in one currency."


def test_through_the_reducer_a_silent_call_is_asked_of_an_alias_match_and_leaves_the_judges_verdict() -> None:
    embedder = StaticEmbedder()
    judge = SemanticJudge(EmbeddingCache(embedder))
    judge.prepare([FIRST, SECOND, THIRD])
    assert judge.judge(THIRD, "general", FIRST, "general").kind == "distinct"  # only the alias links THIRD
    asked: list[list[str]] = []

    async def echo(children: list[list[Operation]], context: str) -> ReduceOutcome:
        asked.append([op.content for ops in children for op in ops if isinstance(op, AddOp)])
        return ReduceOutcome([op for child in children for op in child], Usage(calls=1), 0.0)

    logs = ReducerLogs(playbooks={})
    record: PlaybookVersion | None = None
    for batch, text in enumerate([FIRST, SECOND, THIRD]):
        reducer = Reducer(ReducerConfig(ask_reducer=True), echo, embedder)  # a restarted reducer each batch
        playbook = logs.playbook("pb")
        partial = PartialUpdate(playbook_id="pb", batch_id=batch, node=0, k=1, base_version=playbook.version,
                                operations=[AddOp(section="general", content=text, support=1)],
                                reflection_ids=[f"r{batch}"], trace_ids=[f"t{batch}"], items_read=1,
                                expected_items=1, batch_closed_at=NOW)
        effects = asyncio.run(reducer.next_version(playbook, [partial], parent_version=None, manifest=None,
                                                   previous_at=None, now=NOW))
        [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
        logs.take_version(PlaybookVersion.from_json_bytes(record.to_json_bytes()))
    assert record is not None and asked[-1] == [THIRD]  # the alias match was put to the call
    first = next(e for e in record.entries if e.content == FIRST)
    assert (first.helpful, first.aliases) == (0, [SECOND])  # SECOND folded by the judge's verdict on FIRST
    assert sorted(e.content for e in record.entries) == sorted([FIRST, THIRD])  # the call said nothing of THIRD
