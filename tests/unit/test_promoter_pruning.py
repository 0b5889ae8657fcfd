"""A promoter that drops what it no longer reads (``combee_core.promote.promoter_memory``) decides and requests
exactly as one that keeps everything, over random histories (``promoter_twins``), and after a long one holds only
what its next decisions rest on."""

from __future__ import annotations

import pytest

from combee_core.models import EvalResult, PlaybookEntry, entries_digest
from combee_core.processors.effects import Effect
from combee_core.promote.promoter_resume import floors
from combee_core.promote.score_cache import SummarisedScoreCache
from combee_core.topology import Topic
from tests.unit.promoter_twins import CANARY, NO_CANARY, PLAYBOOKS, Twins, decisions, requests
from tests.unit.test_promoter_resume import HELD_OUT, NOW, _nothing


@pytest.mark.parametrize("canary", [False, True])
@pytest.mark.parametrize("seed", range(12))
async def test_a_pruning_promoter_emits_the_same_effects_as_one_that_keeps_everything(seed: int, canary: bool) -> None:
    """Every advance of both promoters gives the same effects (requests, counts, decisions, in order:
    ``Twins.advance`` asserts it), over histories with rejections, failed evaluations, empty batches, repeated
    contents, stray results and, with a canary, verdicts; some candidates repeat a content the pruning promoter had
    already summarised, and are scored without a request."""
    twins = Twins(seed, CANARY if canary else NO_CANARY)
    await twins.run(600)
    actions = {d.action for d in decisions(twins.effects)}
    assert {"promote", "reject"} <= actions and ("canary" in actions) == canary
    assert requests(twins.effects) and twins.pruned.cache.summaries
    assert twins.summarised_repeats > 0


async def test_after_500_versions_a_promoter_holds_only_what_its_next_decisions_rest_on() -> None:
    """The bound: full results only of the contents still incomplete (a needed one before its last result, a
    stray result's), and one summary (a score) per complete content; costs only from each playbook's
    ``floors(...).version`` on (and the newest version read), reflection usage only from ``floors(...).batch`` on;
    requests remembered only for contents not summarised. The keeping promoter holds every result, cost and usage."""
    twins = Twins(7, NO_CANARY)
    await twins.run_to(500)
    pruned, whole = twins.pruned, twins.whole
    tasks = HELD_OUT.tasks
    incomplete = {digest for digest, _ in pruned.cache.results if pruned.cache.missing(digest, tasks)}
    assert {digest for digest, _ in pruned.cache.results} == incomplete
    complete = {digest for digest, _ in whole.cache.results if not whole.cache.missing(digest, tasks)}
    assert set(pruned.cache.summaries) == complete and len(complete) > 50
    assert len(pruned.cache.results) < 3 * len(HELD_OUT.tasks) < len(whole.cache.results) / 10
    for playbook_id in PLAYBOOKS:
        floor = floors(pruned, playbook_id)
        costs = pruned.costs[playbook_id]
        newest = max(costs)
        assert list(costs) == list(range(min(floor.version, newest), newest + 1))  # from the floor, or the newest
        assert all(batch_id >= floor.batch for batch_id in pruned.reflection_usage[playbook_id])
        assert len(whole.costs[playbook_id]) >= 500 and len(whole.reflection_usage[playbook_id]) >= 500
        assert pruned.digests[playbook_id] == whole.digests[playbook_id]  # kept: small, and they tell decided content
    assert not {digest for _, digest in pruned._requested} & set(pruned.cache.summaries)


async def test_after_an_operator_serves_a_version_below_the_floor_only_the_next_promotions_cost_differs() -> None:
    """The documented case (``promoter_memory``): v1-v3 promoted, an operator rolls back to v1 (v4 is held: paused)
    and promotes v1 again; the next promotion is costed from v2 by the keeping promoter, but from the floor of the
    last decisions on by the pruning one (v2's cost was dropped once v3 was served). Everything else is the same."""
    twins = Twins(0, NO_CANARY)
    twins.scores[entries_digest([])] = 0.0
    for version, score in ((1, 0.2), (2, 0.3), (3, 0.4), (4, 0.1), (5, 0.9)):
        twins.candidate("pa", [PlaybookEntry(entry_id=f"e{version}", section="tools", content=f"op {version}",
                                             created_version=version, updated_version=version)])
        twins.scores[twins.whole.digests["pa"][version]] = score
        if version == 5:
            break
        await _decide(twins)
        if version == 3:
            twins.operator("pa", "rollback", 1)
    twins.operator("pa", "operator-promote", 1)
    assert [d.action for d in decisions(twins.effects)] == ["promote", "promote", "promote", "hold"]
    pruned = await twins.pruned.advance("pa", None, NOW, _nothing)
    while not decisions(pruned):
        _answer(twins, pruned)
        pruned = await twins.pruned.advance("pa", None, NOW, _nothing)
    whole = await twins.whole.advance("pa", None, NOW, _nothing)
    [mine], [theirs] = decisions(pruned), decisions(whole)
    assert (mine.action, mine.candidate_version, mine.previous_version) == ("promote", 5, 1)
    assert theirs.cost is not None and mine.cost is not None
    assert (theirs.cost.candidates, mine.cost.candidates) == (4, 3)  # v2-v5 against v3-v5
    assert mine.model_copy(update={"cost": theirs.cost}) == theirs


def _answer(twins: Twins, effects: list[Effect]) -> None:
    for request in requests(effects):
        twins.write(Topic.EVAL_RESULTS, EvalResult(
            request_id=request.request_id, playbook_id=request.playbook_id, digest=request.digest,
            task_id=request.task_id, score=twins.scores[request.digest], evaluator="test", evaluator_model="sim",
            evaluated_at=NOW))


async def _decide(twins: Twins) -> None:
    """Advance both promoters on pa until they decide (their effects compared), the results as ``twins.scores``."""
    while not decisions(effects := await twins.advance("pa")):
        twins.pending.clear()
        _answer(twins, effects)


def test_a_summarised_content_answers_as_its_results_did() -> None:
    """``SummarisedScoreCache.summarise``: missing, score and add (a repeat) the same before and after; not before the
    content is complete; another task set over the summarised tasks is refused rather than answered wrongly."""
    cache, tasks, d = SummarisedScoreCache(), HELD_OUT.tasks, "d" * 64

    def result(task_id: str, score: float | None) -> EvalResult:
        return EvalResult(request_id=task_id, playbook_id="pa", digest=d, task_id=task_id, score=score,
                          evaluator="test", evaluator_model="sim", evaluated_at=NOW)

    for task, score in zip(tasks[:-1], (0.25, 0.5)):
        cache.add(result(task.task_id, score))
    assert not cache.summarise(d, tasks) and cache.missing(d, tasks) == [tasks[-1]]
    cache.add(result(tasks[-1].task_id, 0.75))
    before = (cache.missing(d, tasks), cache.score(d, tasks))
    assert cache.summarise(d, tasks) and not cache.results
    assert (cache.missing(d, tasks), cache.score(d, tasks)) == before == ([], (0.5, "", "sim"))
    assert not cache.add(result(tasks[0].task_id, 0.0)) and cache.score(d, tasks) == before[1]
    with pytest.raises(ValueError, match="another task set"):
        cache.score(d, tasks[:1])
