"""Held-out task sets as data (``combee_core.promote.task_sets``) and the promoter scoring each playbook on the set
it is pinned to, without a broker."""

from __future__ import annotations

import pytest

from combee_core.models import EvalRequest, EvalResult, HeldOutTask, ProposerModels
from combee_core.processors.testing import EffectLog
from combee_core.promote.processor import Promoter
from combee_core.promote.promotion import PromotionRule
from combee_core.promote.task_sets import (
    TaskSetError,
    TaskSetRegistry,
    load_tasks,
    next_version,
    parse_pins,
    pinned_ref,
)
from combee_core.settings import CombeeSettings
from tests.unit.test_processor_promoter import CatchUp, _version
from tests.unit.test_promoter_resume import NOW, task_set

LINES = ['{"id": "capital-fr", "input": "Capital of France?", "expected": "Paris"}',
         '',
         '{"task_id": "tone", "input": "Reply to an angry customer", "rubric": "polite, offers a fix", '
         '"metadata": {"tier": "gold"}}']
PROPOSER = ProposerModels(reflector="r", aggregator="a", reducer="d")


def test_a_jsonl_file_becomes_tasks_and_any_bad_line_refuses_the_whole_file_naming_the_line():
    tasks = load_tasks(LINES, "mine.jsonl")
    assert [(t.task_id, t.expected, t.rubric, t.metadata) for t in tasks] == [
        ("capital-fr", "Paris", None, {}), ("tone", None, "polite, offers a fix", {"tier": "gold"})]
    for bad, said in ((['{"id": "a"}'], "line 1: input"), (["not json"], "line 1: not JSON"),
                      (['[1]'], "expected a JSON object"), ([LINES[0], LINES[0]], "line 2: task id 'capital-fr' is "
                                                                                   "also on line 1"),
                      (['{"id": "a", "input": "x", "score": 1}'], "line 1: score"), ([], "no tasks")):
        with pytest.raises(TaskSetError, match=said):
            load_tasks(bad, "mine.jsonl")


def test_versions_are_numbered_per_name_the_first_record_of_each_counts_and_the_same_tasks_write_nothing():
    registry = TaskSetRegistry()
    tasks = load_tasks(LINES)
    first = next_version(registry, "mine", tasks, source="mine.jsonl", by="me", now=NOW)
    assert first is not None and first.label == "mine@1" and registry.apply(first)
    assert next_version(registry, "mine", tasks, source="again", by="me", now=NOW) is None
    second = next_version(registry, "mine", tasks[:1], source="fewer", by="me", now=NOW)
    assert second is not None and second.version == 2
    rival = second.model_copy(update={"source": "another writer"})
    assert registry.apply(second) and not registry.apply(rival)  # the first record of mine@2 counts
    assert registry.resolve("mine") == second and registry.resolve("mine@1") == first
    assert registry.resolve("mine@3") is None and registry.resolve("other") is None
    with pytest.raises(TaskSetError, match="letters, digits"):
        next_version(registry, "no/slash", tasks, source="", by="", now=NOW)


def test_pins_name_a_set_per_playbook_with_a_default_and_bad_pins_are_one_line_errors():
    pins = parse_pins("support=support-heldout@2, *=suite")
    assert pinned_ref(pins, "support") == "support-heldout@2" and pinned_ref(pins, "other") == "suite"
    assert pinned_ref(parse_pins("support=s"), "other") is None
    for bad, said in (("support", "PLAYBOOK=SET"), ("a=s,a=t", "pinned twice"), ("a=s@0", "number from 1"),
                      ("a=s@x", "number from 1"), ("a=bad name", "letters")):
        with pytest.raises(TaskSetError, match=said):
            parse_pins(bad)
    assert CombeeSettings.load({}).held_out_sets == "*=suite"
    with pytest.raises(ValueError, match="COMBEE_HELD_OUT_SETS"):
        CombeeSettings.load({"COMBEE_HELD_OUT_SETS": "nope"})


def _requests(log: EffectLog) -> list[EvalRequest]:
    return [r for r in log.published("eval-requests") if isinstance(r, EvalRequest)]


def _results(requests: list[EvalRequest], score: float) -> list[EvalResult]:
    return [EvalResult(request_id=r.request_id, playbook_id=r.playbook_id, digest=r.digest, task_id=r.task_id,
                       task_set=r.task_set, score=score, evaluator="test", evaluator_model="m", evaluated_at=NOW)
            for r in requests]


async def test_each_playbook_is_scored_on_its_own_pinned_set_with_the_tasks_expected_answers_in_the_requests():
    mine = task_set("mine", load_tasks(LINES))
    theirs = task_set("theirs", [HeldOutTask(task_id="capital-fr", input="another question", expected="Lyon")])
    promoter = Promoter(PromotionRule(), {"pa": "mine", "*": "theirs"}, PROPOSER, task_sets=[mine, theirs])
    for playbook_id in ("pa", "pb"):
        promoter.apply_version(_version(1, ["a lesson"]).model_copy(update={"playbook_id": playbook_id}))
    log = EffectLog()
    log.extend(await promoter.advance("pa", None, NOW, CatchUp()))
    log.extend(await promoter.advance("pb", None, NOW, CatchUp()))
    requests = _requests(log)
    by_playbook = {pb: {(r.task_set, r.task_id, r.expected, r.rubric) for r in requests if r.playbook_id == pb}
                   for pb in ("pa", "pb")}
    assert by_playbook["pa"] == {("mine@1", "capital-fr", "Paris", None), ("mine@1", "tone", None,
                                                                          "polite, offers a fix")}
    assert by_playbook["pb"] == {("theirs@1", "capital-fr", "Lyon", None)}
    # the empty playbook is the incumbent of both, with the same digest: pa's results are not pb's (same task id)
    for result in _results([r for r in requests if r.playbook_id == "pa"], 0.5):
        promoter.apply_result(result)
    decided = EffectLog()
    decided.extend(await promoter.advance("pa", None, NOW, CatchUp()))
    decided.extend(await promoter.advance("pb", None, NOW, CatchUp()))
    decisions = decided.published("promoted")
    assert [(d.playbook_id, d.action, d.task_set, d.tasks) for d in decisions] == [("pa", "promote", "mine@1", 2)]


async def test_an_unpinned_playbook_is_rejected_saying_how_to_pin_and_a_pinned_set_not_yet_registered_waits(
        caplog):
    promoter = Promoter(PromotionRule(), {"pa": "mine"}, PROPOSER)
    for playbook_id in ("pa", "pb"):
        promoter.apply_version(_version(1, ["a lesson"]).model_copy(update={"playbook_id": playbook_id}))
    log = EffectLog()
    for _ in range(3):
        assert await promoter.advance("pa", None, NOW, CatchUp()) == []  # waits for `combee tasks add`
    waiting = [r.getMessage() for r in caplog.records if "wait for the held-out task set" in r.getMessage()]
    assert len(waiting) == 1 and "'mine'" in waiting[0] and "combee tasks add" in waiting[0]  # said once
    log.extend(await promoter.advance("pb", None, NOW, CatchUp()))
    (rejected,) = log.published("promoted")
    assert rejected.action == "reject" and "no held-out task set is pinned for playbook 'pb'" in rejected.reason
    assert "combee tasks add" in rejected.reason and "COMBEE_HELD_OUT_SETS=pb=NAME" in rejected.reason
    promoter.apply_task_set(task_set("mine", load_tasks(LINES)))
    later = EffectLog()
    later.extend(await promoter.advance("pa", None, NOW, CatchUp()))
    assert {r.task_set for r in _requests(later)} == {"mine@1"}
