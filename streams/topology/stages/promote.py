"""Promoter: scores each candidate version on the pinned held-out set over Kafka and decides, by the promotion
rule, which version agents are served (``promoted``).

Per playbook, candidates are decided in version order, on the held-out task set the playbook is pinned to
(``COMBEE_HELD_OUT_SETS``; the sets are records of ``task-sets``, read as a fifth view): for the next undecided
candidate it sends one ``EvalRequest`` per held-out task for the candidate's content and for the served version's,
unless a result for that (content digest, task) is already on ``eval-results`` (the cache); once every score is in,
it writes a ``PromotionDecision`` with the next decision id and keeps it only if it counts (first record of the id
wins). Its state is four views besides ``task-sets``: ``playbook`` (candidates), ``promoted`` (the ledger),
``eval-results`` (the cache) and ``batches`` (what each batch's reflections cost). It consumes ``eval-results`` in
its group only to own the playbooks (one partition: one promoter at a time); a restart re-sends the requests of the
candidate in flight whose results are not on the log yet. Its views (``streams.topology.promoter_views``) are
checkpointed: a start reads each log from the oldest record its decisions still rest on
(``combee_core.promote.promoter_resume``), not from the beginning; with a canary, every partition of ``traces``
too, from its first trace a verdict can still count (``streams.topology.views.live_traces``).

The decisions are ``combee_core.promote.processor``'s; this stage keeps the views and performs the effects.

**One decision per id across a takeover.** A decision is written only while this stage owns the playbook, and a
partition is released only once a decision being written has landed (``streams.topology.write_fence``), so the next
owner, which catches its views up to the log's end before it owns the partition, reads it. Before writing, the
view of ``promoted`` is caught up to the log's end (measured by a fetch, ``LogView.catch_up``): a decision another
promoter wrote meanwhile is read, and this one is not written. What this cannot exclude without transactions (Tansu
has none): a promoter that lost its group session while its send was in flight (a process paused past the session
timeout); its record then lands after the new owner's, is void under the reading rule, and is counted
(``decisions_lost`` where the loser sees it).
"""

from __future__ import annotations

import logging
from functools import partial

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import PromotionDecision, ProposerModels, TaskSetVersion, utc_now
from combee_core.processors.effects import Publish
from combee_core.promote.processor import Promoter
from combee_core.promote.promoter_resume import canary_floor
from combee_core.promote.promotion import PromotionRule
from combee_core.promote.task_sets import parse_pins
from combee_core.topology import PROMOTE, Topic
from streams.topology.effects import perform
from streams.topology.promoter_views import PromoterViews
from streams.topology.runtime import Stage
from streams.topology.views.live_traces import LiveScores
from streams.topology.views.log_view import model_view
from streams.topology.write_fence import WriteFence

log = logging.getLogger(__name__)


class PromoterStage(Stage):
    spec = PROMOTE
    input_model = None  # the group only gives ownership: results are read through the eval-results view

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        rule = PromotionRule(epsilon=settings.promotion_epsilon, canary_share=settings.canary_share,
                             canary_min_traces=settings.canary_min_traces)
        proposer = ProposerModels(reflector=settings.reflector_model, aggregator=settings.aggregator_model,
                                  reducer=settings.reducer_model)
        self.promoter = Promoter(rule, parse_pins(settings.held_out_sets), proposer)
        self.live = LiveScores(self, partial(canary_floor, self.promoter)) if rule.canary_share > 0 else None
        self.logs = PromoterViews(self, self.promoter)
        self.task_sets = model_view(self, Topic.TASK_SETS, TaskSetVersion, self.promoter.apply_task_set)
        self.fence = WriteFence(self.owns_key)

    @property
    def ledger(self):
        return self.promoter.ledger

    async def prepare(self) -> None:
        await self.task_sets.start()
        await self.logs.start()
        if self.live is not None:
            await self.live.start()

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.promoter.forget_requests()

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.fence.released()  # a decision in flight lands before the partition goes

    async def handle(self, record: ConsumerRecord, value: bytes | None) -> None:
        self.done(record)  # results are taken from the eval-results view; the group only gives ownership

    async def tick(self, now: float) -> None:
        for playbook_id in self.promoter.playbooks():
            if self.owns_key(playbook_id):
                live = self.live.scores.get(playbook_id, []) if self.live is not None else None
                effects = await self.promoter.advance(playbook_id, live, utc_now(), self.logs.batches.catch_up)
                await perform(self, effects, self._write_decision)

    async def _write_decision(self, publish: Publish) -> bool:
        assert publish.number is not None
        playbook_id, decision_id = publish.number
        async with self.fence.owning(playbook_id) as owned:
            if not owned:  # released while deciding: the new owner decides
                log.info("%s decision %d not written: the playbook was taken over meanwhile", playbook_id,
                         decision_id)
                return False
            await self.logs.decisions.catch_up()
            if self.ledger.next_id(playbook_id) != decision_id:  # another promoter's decision is on the log
                log.info("%s decision %d not written: the log already holds it", playbook_id, decision_id)
                self.ctx.count("decisions_not_written")
                return False
            if not await self.logs.decisions.write(publish):
                return False
        decision = publish.value
        assert isinstance(decision, PromotionDecision)
        log.info("%s v%s: %s (%s)", decision.playbook_id, decision.candidate_version, decision.action, decision.reason)
        return True
