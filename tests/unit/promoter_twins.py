"""Random promotion histories read by two promoters at once: one that prunes what it no longer reads
(``combee_core.promote.promoter_memory``) and one that keeps everything. Both apply every record of the same
logs in the same order (``test_promoter_resume._apply``) and are asked to advance with the same arguments; the
history is driven by the keeping one's effects.

A history mixes, per playbook: candidates built as the reducer builds them (``next_base``), with new content, the
base's content again (an empty batch: after a rejection, the served content), or any content seen before
(repeated); results answered out of order, sometimes twice (a contradicting second result), sometimes failed;
stray results of a random content and task (an incomplete content, or one complete before it is requested); with a
canary, live traces of the served version and the one in canary."""

from __future__ import annotations

import random
from collections.abc import Sequence

from combee_core.models import (
    BatchManifest,
    EvalRequest,
    EvalResult,
    PlaybookEntry,
    PromotionDecision,
    ProposerModels,
    Usage,
    entries_digest,
)
from combee_core.processors.effects import Effect, Publish
from combee_core.promote.promoter_resume import floors
from combee_core.promote.promotion import PromotionRule, next_base, operator_decision
from combee_core.topology import Topic
from tests.unit.test_promoter_resume import HELD_OUT, NOW, ORDER, _apply, _nothing, _version, promoter_on

PLAYBOOKS = ("pa", "pb")
PROPOSER = ProposerModels(reflector="r", aggregator="a", reducer="d")
CANARY = PromotionRule(epsilon=0.01, canary_share=0.5, canary_min_traces=3)
NO_CANARY = PromotionRule(epsilon=0.01)


class Twins:
    """The logs of one random history and the two promoters reading them."""

    def __init__(self, seed: int, rule: PromotionRule) -> None:
        self.rng = random.Random(seed)
        self.rule = rule
        self.pruned = promoter_on(rule)
        self.whole = promoter_on(rule, keep_everything=True)
        self.logs: dict[Topic, list] = {topic: [] for topic in ORDER}
        self.entries: dict[tuple[str, int], list[PlaybookEntry]] = {}
        self.contents: list[list[PlaybookEntry]] = [[]]
        self.scores: dict[str, float | None] = {}
        self.pending: list[EvalResult] = []
        self.live: dict[str, list[tuple[int, float | None]]] = {pb: [] for pb in PLAYBOOKS}
        self.effects: list[Effect] = []
        """Every effect of the keeping promoter's advances, in order (the pruning one's were the same)."""
        self.operated = False
        self.summarised_repeats = 0
        """Candidates whose content was already summarised by the pruning promoter when they were read."""

    def write(self, topic: Topic, value) -> None:
        self.logs[topic].append(value)
        for promoter in (self.pruned, self.whole):
            _apply(promoter, None, topic, len(self.logs[topic]) - 1, value)

    # ------------------------------------------------------------------------------------------ the history

    def candidate(self, playbook_id: str, entries: list[PlaybookEntry] | None = None) -> bool:
        """The next version, if the reducer can build it (the decision on the previous one is on the log); its
        entries chosen at random unless given."""
        version = self.whole.versions_gate.next(playbook_id)
        base = next_base(self.whole.ledger, playbook_id, version - 1)
        if base is None:
            return False
        base_entries = base.entries if base.entries is not None else self.entries.get((playbook_id, version - 1), [])
        kind = self.rng.random()
        if entries is not None:
            pass
        elif kind < 0.2:
            entries = list(base_entries)  # an empty batch
        elif kind < 0.4:
            entries = list(self.rng.choice(self.contents))  # a content seen before
        else:
            lesson = PlaybookEntry(entry_id=f"e{version}", section="tools", content=f"lesson {self.rng.randrange(12)}",
                                   created_version=version, updated_version=version)
            entries = [*base_entries[-3:], lesson]
        self.write(Topic.BATCHES, BatchManifest(
            playbook_id=playbook_id, batch_id=version - 1, base_version=version - 1, trace_ids=[f"t{version}"],
            reflection_ids=[f"r{version}"], n=1, k=1, p=1, seed=0, subgroup_sizes=[1], target_batch_size=1,
            closed_by="size", closed_at=NOW, reflection_usage=Usage(calls=version, cost_usd=0.01 * version)))
        self.entries[(playbook_id, version)] = entries
        self.contents.append(entries)
        self.summarised_repeats += entries_digest(entries) in self.pruned.cache.summaries
        self.write(Topic.PLAYBOOK, _version(playbook_id, version, base.parent_version).model_copy(
            update={"entries": entries}))
        return True

    def _result(self, playbook_id: str, digest: str, task_id: str, request_id: str) -> EvalResult:
        if digest not in self.scores:
            self.scores[digest] = None if self.rng.random() < 0.05 else self.rng.choice([0.2, 0.4, 0.5, 0.6, 0.8])
        score = self.scores[digest]
        if self.rng.random() < 0.2:  # a contradicting result (the first on the log counts, whichever it is)
            score = None if score is None else 1.0 - score
        return EvalResult(request_id=request_id, playbook_id=playbook_id, digest=digest, task_id=task_id, score=score,
                          error="boom" if score is None else "", evaluator="test", evaluator_model="sim",
                          evaluated_at=NOW)

    async def advance(self, playbook_id: str) -> list[Effect]:
        """Both promoters advance; the effects must be the same. The requests are answered later, the decision
        is written."""
        live = self.live[playbook_id] if self.rule.canary_share > 0 else None
        pruned = await self.pruned.advance(playbook_id, live, NOW, _nothing)
        whole = await self.whole.advance(playbook_id, live, NOW, _nothing)
        assert pruned == whole, (playbook_id, len(self.effects))
        if not self.operated:  # the same resume points too (an operator's rollback below them moves the batch floor)
            assert floors(self.pruned, playbook_id) == floors(self.whole, playbook_id)
        self.effects += whole
        for value in [e.value for e in whole if isinstance(e, Publish)]:
            if isinstance(value, EvalRequest):
                self.pending.append(self._result(playbook_id, value.digest, value.task_id, value.request_id))
                if self.rng.random() < 0.3:
                    self.pending.append(self._result(playbook_id, value.digest, value.task_id, value.request_id))
            elif isinstance(value, PromotionDecision):
                self.write(Topic.PROMOTED, value)
        return whole

    def answer(self) -> None:
        """Some pending results, in random order; now and then a stray one."""
        self.rng.shuffle(self.pending)
        for _ in range(self.rng.randint(0, len(self.pending))):
            self.write(Topic.EVAL_RESULTS, self.pending.pop())
        if self.rng.random() < 0.05:
            digest = entries_digest(self.rng.choice(self.contents))
            task = self.rng.choice(HELD_OUT.tasks)
            self.write(Topic.EVAL_RESULTS, self._result("pa", digest, task.task_id, f"stray/{task.task_id}"))

    def traces(self, playbook_id: str) -> None:
        canary = self.whole.ledger.canary(playbook_id)
        if canary is not None:
            served = self.whole.ledger.served_version(playbook_id)
            for _ in range(self.rng.randint(0, 3)):
                version = self.rng.choice([served, canary.version])
                score = None if self.rng.random() < 0.1 else self.rng.random()
                self.live[playbook_id].append((version, score))

    async def run(self, ticks: int) -> None:
        for _ in range(ticks):
            playbook_id = self.rng.choice(PLAYBOOKS)
            step = self.rng.random()
            if step < 0.3:
                self.candidate(playbook_id)
            elif step < 0.7:
                await self.advance(playbook_id)
            else:
                self.answer()
            self.traces(playbook_id)

    async def run_to(self, versions: int) -> None:
        """Until each playbook has ``versions`` versions."""
        while min(self.whole.versions_gate.next(pb) for pb in PLAYBOOKS) <= versions:
            await self.run(1)

    # ------------------------------------------------------------------------------------------ operators

    def operator(self, playbook_id: str, action: str, version: int) -> None:
        self.operated = True
        served = None if version == 0 else next(v for v in self.logs[Topic.PLAYBOOK]
                                                if (v.playbook_id, v.version) == (playbook_id, version))
        self.write(Topic.PROMOTED, operator_decision(self.whole.ledger, action, served, playbook_id=playbook_id,
                                                     by="ann@host", why="", rule=self.rule, now=NOW))


def decisions(effects: Sequence[Effect]) -> list[PromotionDecision]:
    return [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PromotionDecision)]


def requests(effects: Sequence[Effect]) -> list[EvalRequest]:
    return [e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, EvalRequest)]
