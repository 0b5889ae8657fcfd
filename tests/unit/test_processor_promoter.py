"""The promoter's decisions, driven without a broker (``combee_core.promote.processor``)."""

from __future__ import annotations

from datetime import UTC, datetime

from combee_core.models import EvalRequest, EvalResult, PlaybookEntry, PlaybookVersion, PromotionDecision, VersionStats
from combee_core.processors.effects import Publish
from combee_core.processors.testing import EffectLog
from combee_core.promote.processor import Promoter
from combee_core.promote.promotion import PromotionRule
from tests.unit.test_promoter_resume import HELD_OUT, promoter_on

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _version(n: int, texts: list[str]) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{i}", section="tools", content=t, created_version=n, updated_version=n)
               for i, t in enumerate(texts)]
    return PlaybookVersion(playbook_id="pb", version=n, parent_version=n - 1, batch_id=n - 1, entries=entries,
                           next_entry_number=len(texts) + 1, operations=[], lineage=[f"t{n}"],
                           stats=VersionStats(batch_size=1, k=1, p=1, llm_calls=2), content_hash=f"{n:064x}",
                           published_at=NOW)


class CatchUp:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1


def _promoter() -> Promoter:
    return promoter_on(PromotionRule(epsilon=0.01))


def _answer(requests: list[EvalRequest], score: float) -> list[EvalResult]:
    return [EvalResult(request_id=r.request_id, playbook_id=r.playbook_id, digest=r.digest, task_id=r.task_id,
                       score=score, evaluator="test", evaluator_model="sim", evaluated_at=NOW) for r in requests]


async def test_a_candidate_is_scored_against_the_served_version_once_and_then_decided_by_the_rule():
    promoter, log, catch_up = _promoter(), EffectLog(), CatchUp()
    promoter.apply_version(_version(1, ["a lesson"]))
    assert promoter.playbooks() == ["pb"]
    log.extend(await promoter.advance("pb", None, NOW, catch_up))
    requests = [r for r in log.published("eval-requests") if isinstance(r, EvalRequest)]
    assert len(requests) == 2 * len(HELD_OUT.tasks)  # the empty incumbent's tasks and the candidate's
    assert {p.key for p in log.publishes("eval-requests")} == {f"pb/{t.task_id}" for t in HELD_OUT.tasks}
    assert log.extend(await promoter.advance("pb", None, NOW, catch_up)) == []  # requested once per process

    incumbent, candidate = requests[:3], requests[3:]
    for result in _answer(incumbent, 0.4) + _answer(candidate, 0.6):
        promoter.apply_result(result)
    [decision] = log.extend(await promoter.advance("pb", None, NOW, catch_up))[:1]
    assert isinstance(decision, Publish) and decision.topic == "promoted" and decision.number == ("pb", 0)
    value = decision.value
    assert isinstance(value, PromotionDecision) and value.action == "promote" and value.candidate_version == 1
    assert log.counts()["decisions.promote"] == 1
    assert catch_up.calls == 1  # batch 0's manifest was not in the view: caught up before costing

    assert promoter.apply_decision(value) and await promoter.advance("pb", None, NOW, catch_up) == []
    assert not promoter.apply_decision(value)  # a second record of decision 0 does not count


async def test_a_worse_candidate_is_rejected_and_cached_scores_are_not_requested_again():
    promoter, log = _promoter(), EffectLog()
    promoter.apply_version(_version(1, ["a lesson"]))
    requests = [r for r in (await promoter.advance("pb", None, NOW, CatchUp())) if isinstance(r, Publish)]
    asked = [p.value for p in requests if isinstance(p.value, EvalRequest)]
    for result in _answer(asked[:3], 0.8) + _answer(asked[3:], 0.5):
        promoter.apply_result(result)
    promoter.forget_requests()  # a new owner: nothing is missing, so nothing is sent again
    effects = log.extend(await promoter.advance("pb", None, NOW, CatchUp()))
    assert log.published("eval-requests") == []
    [value] = log.published("promoted")
    assert isinstance(value, PromotionDecision) and value.action == "reject"
    assert log.counts()["decisions.reject"] == 1 and len(effects) == 2
