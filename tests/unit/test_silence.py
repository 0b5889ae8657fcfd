"""Silence is no decision (``combee_core.playbook.uncertain``): with a real LLM as the reducer, a lesson the judge
calls an entry's lesson by closeness in meaning alone is sent to the reducer call; a call that says nothing of it
leaves the judge's verdict (folded into the entry, no counter raised), a call that explicitly keeps both makes two
lessons and is remembered in the version (not asked again, replayed alike), and a call that merges reinforces."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from functools import lru_cache

from combee_core.models import AddOp, Operation, PartialUpdate, PlaybookEntry, PlaybookVersion, TagOp, Usage
from combee_core.playbook import Playbook
from combee_core.playbook.embedding import EmbeddingCache, StaticEmbedder
from combee_core.playbook.meaning import SemanticJudge
from combee_core.processors.effects import Publish
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reducer_state import ReducerLogs
from combee_core.reduce.reduction import ReduceOutcome
from tests.unit.embedders import static_embedder

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RULE = "Remove duplicate rows before counting records."
REWORDED = "Count records only after duplicates have been dropped."
ENTRY = "gen-00001"


@lru_cache(maxsize=1)
def _static() -> StaticEmbedder:
    return static_embedder()


class Scripted:
    """A reducer stand-in: ``silent`` echoes what it reads, ``keep`` echoes each ADD marked as another lesson than
    the entry, ``merge`` turns each ADD into a TAG helpful of the entry."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls: list[list[list[Operation]]] = []

    async def reduce(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        self.calls.append(children)
        ops = [op for child in children for op in child]
        if self.mode == "keep":
            ops = [op.model_copy(update={"distinct_from": [ENTRY]}) if isinstance(op, AddOp) else op for op in ops]
        elif self.mode == "merge":
            ops = [TagOp(entry_id=ENTRY, tag="helpful", count=op.support) if isinstance(op, AddOp) else op
                   for op in ops]
        return ReduceOutcome(ops, Usage(calls=1), 0.0)


def _playbook() -> Playbook:
    return Playbook.from_entries("pb", 1, [PlaybookEntry(entry_id=ENTRY, section="general", content=RULE, helpful=4,
                                                         created_version=1, updated_version=1)])


def _partial(version: int) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=version, node=0, k=1, base_version=version,
                         operations=[AddOp(section="general", content=REWORDED, support=2)],
                         reflection_ids=[f"r{version}a", f"r{version}b"], trace_ids=[f"t{version}a", f"t{version}b"],
                         items_read=2, expected_items=2, batch_closed_at=NOW)


def _next(role: Scripted, logs: ReducerLogs) -> PlaybookVersion:
    reducer = Reducer(ReducerConfig(ask_reducer=True), role.reduce, _static())
    playbook = logs.playbook("pb")
    effects = asyncio.run(reducer.next_version(playbook, [_partial(playbook.version)], parent_version=None,
                                               manifest=None, previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    logs.take_version(PlaybookVersion.from_json_bytes(record.to_json_bytes()))  # all a restarted reducer has
    return record


def _logs() -> ReducerLogs:
    return ReducerLogs(playbooks={"pb": _playbook()})


def _entry(record: PlaybookVersion) -> PlaybookEntry:
    return next(e for e in record.entries if e.entry_id == ENTRY)


def test_the_pair_is_one_the_judge_calls_the_same_lesson_by_closeness_alone() -> None:
    judge = SemanticJudge(EmbeddingCache(_static()))
    assert judge.judge(REWORDED, "general", RULE, "general").kind == "same"


def test_a_silent_call_leaves_the_judges_verdict_and_raises_no_counter() -> None:
    role, logs = Scripted("silent"), _logs()
    for _ in range(2):
        record = _next(role, logs)
        assert [e.content for e in record.entries] == [RULE]  # consolidated: no second entry for one lesson
        assert _entry(record).helpful == 4  # closeness alone, unconfirmed: no counter raised
        assert record.curation.kept_apart == []
    record = _next(role, logs)  # 6 distinct traces now restated the wording: more than the rule's evidence 5
    assert [(e.content, e.helpful) for e in record.entries] == [(REWORDED, 5)]  # it takes the slot (a challenge)
    assert len(role.calls) == 3  # nothing decided, so it is asked again


def test_a_call_that_keeps_both_makes_two_lessons_once_and_is_not_asked_again() -> None:
    role, logs = Scripted("keep"), _logs()
    first = _next(role, logs)
    assert sorted(e.content for e in first.entries) == sorted([RULE, REWORDED]) and _entry(first).helpful == 4
    assert [(p.entry_id, p.content, p.version) for p in first.curation.kept_apart] == [(ENTRY, REWORDED, 2)]
    [add] = [a for a in first.operations if isinstance(a.operation, AddOp)]
    assert add.reason.endswith(f"the reducer call kept it apart from {ENTRY}")
    silent = Scripted("silent")
    second = _next(silent, logs)  # the same lesson again, and a reducer that would say nothing
    assert silent.calls == []  # the pair was decided: not sent to the call again
    assert _entry(second).helpful == 4
    [new] = [e for e in second.entries if e.entry_id != ENTRY]
    assert new.content == REWORDED and new.helpful == 2  # the identical wording reinforces its own entry
    assert second.curation.kept_apart == first.curation.kept_apart


def test_a_partial_cannot_keep_a_pair_apart_only_the_reducer_call_can() -> None:
    role, logs = Scripted("silent"), _logs()
    partial = _partial(1)
    forged = partial.model_copy(update={"operations": [
        AddOp(section="general", content=REWORDED, support=2, distinct_from=[ENTRY])]})
    reducer = Reducer(ReducerConfig(ask_reducer=True), role.reduce, _static())
    effects = asyncio.run(reducer.next_version(logs.playbook("pb"), [forged], parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    assert [e.content for e in record.entries] == [RULE] and record.curation.kept_apart == []


def test_a_call_that_merges_reinforces_the_entry() -> None:
    role, logs = Scripted("merge"), _logs()
    record = _next(role, logs)
    assert [e.content for e in record.entries] == [RULE] and _entry(record).helpful == 6


def test_without_a_real_reducer_the_judge_alone_reinforces() -> None:
    reducer = Reducer(ReducerConfig(ask_reducer=False), Scripted("silent").reduce, _static())
    effects = asyncio.run(reducer.next_version(_playbook(), [_partial(1)], parent_version=None, manifest=None,
                                               previous_at=None, now=NOW))
    [record] = [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion)]
    assert [e.content for e in record.entries] == [RULE] and _entry(record).helpful == 6
