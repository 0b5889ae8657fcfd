"""Promoter: scores each candidate version on the pinned held-out set over Kafka and decides, by the promotion
rule, which version agents are served (``promoted``).

Per playbook, candidates are decided in version order: for the next undecided candidate it sends one
``EvalRequest`` per held-out task for the candidate's content and for the served version's, unless a result for
that (content digest, task) is already on ``eval-results`` (the cache); once every score is in, it writes a
``PromotionDecision`` with the next decision id and keeps it only if it counts (first record of the id wins). Its
state is three views read from the beginning: ``playbook`` (candidates), ``promoted`` (the ledger) and
``eval-results`` (the cache). It consumes ``eval-results`` in its group only to own the playbooks (one partition:
one promoter at a time); a restart re-sends the requests of the candidate in flight whose results are not on the
log yet.

The decisions are ``combee_core.processors.promoter``'s; this stage keeps the views and performs the effects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import BatchManifest, EvalResult, PlaybookVersion, PromotionDecision, ProposerModels, utc_now
from combee_core.processors.effects import Publish
from combee_core.processors.promoter import HeldOutSet, Promoter
from combee_core.promotion import LiveScore, PromotionRule
from combee_core.tasks import build_suite
from combee_core.topology import PROMOTE, Topic
from streams.topology.effects import perform
from streams.topology.log_view import LogView
from streams.topology.runtime import Stage
from streams.topology.topic_reader import TopicReader

log = logging.getLogger(__name__)

STAGE = PROMOTE.name


class LiveScores:
    """With a canary: (playbook_version, score) of every trace, per playbook, in the order of its traces partition,
    read from the beginning of every partition of ``traces`` outside any group."""

    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self.scores: dict[str, list[LiveScore]] = {}
        self._closed = asyncio.Event()
        self._reader: TopicReader | None = None

    async def start(self) -> None:
        ctx = self._stage.ctx
        topic = ctx.settings.topic(Topic.TRACES)
        self._reader = await TopicReader(ctx.bootstrap, ctx.profile, what=f"{self._stage.name}'s trace reader").start()
        await self._reader.assign(await self._reader.partitions(topic, refresh=True) or [TopicPartition(topic, 0)])
        self._stage.spawn(self._follow(), name=f"{self._stage.name}-live-scores", service=True)
        self._stage.views.append(self)

    def take(self, value: bytes | None) -> None:
        """One trace record; what is not a readable trace is the reflector's to dead-letter, not counted here."""
        try:
            trace = orjson.loads(value or b"")
            playbook_id, version, score = trace["playbook_id"], trace["playbook_version"], trace.get("score")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        if isinstance(playbook_id, str) and isinstance(version, int) and (
                score is None or isinstance(score, (int, float))):
            self.scores.setdefault(playbook_id, []).append((version, None if score is None else float(score)))

    async def _follow(self) -> None:
        assert self._reader is not None
        try:
            async for records in self._reader.follow(self._closed):
                for record in records:
                    self.take(record.value)
        finally:
            await self._reader.stop()

    async def catch_up(self) -> None:
        """Nothing to wait for: a verdict counts the first traces of the log, whenever it is computed."""

    def close(self) -> None:
        self._closed.set()


def take_decision(stage: Stage, view: LogView, record: ConsumerRecord,
                  apply: Callable[[PromotionDecision], bool]) -> None:
    """A record of ``promoted`` for a stage's view: ``apply`` says whether it counts (its origin is then known)."""
    decision = stage.read_state(record, PromotionDecision)
    if decision is not None:
        view.origin(record, (decision.playbook_id, decision.decision_id), apply(decision))


async def write_decision(stage: Stage, view: LogView, publish: Publish) -> PromotionDecision | None:
    """Write a numbered decision on ``promoted``: the decision once the view shows it counts, None when another
    record took its id first (the stage decides again on the next tick)."""
    decision = publish.value
    assert publish.number is not None and isinstance(decision, PromotionDecision)
    if await view.write(publish.number, decision.to_json_bytes()):
        return decision
    stage.ctx.count("decisions_lost")
    log.warning("%s decision %d: another record took the id first; deciding again", *publish.number)
    return None


def held_out_set(settings) -> tuple[str, tuple]:
    """(name, tasks) of the pinned held-out set: the suite's held-out split, which no training trace comes from."""
    suite = build_suite(families=settings.eval_suite_families, seed=settings.eval_suite_seed)
    return f"suite-{suite.seed}-{len(suite.families)}.held-out", suite.held_out


class PromoterStage(Stage):
    name = STAGE
    consumes = PROMOTE.consumes

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        rule = PromotionRule(epsilon=settings.promotion_epsilon, canary_share=settings.canary_share,
                             canary_min_traces=settings.canary_min_traces)
        self.task_set, self.tasks = held_out_set(settings)
        proposer = ProposerModels(reflector=settings.reflector_model, aggregator=settings.aggregator_model,
                                  reducer=settings.reducer_model)
        self.promoter = Promoter(rule, HeldOutSet(self.task_set, tuple(self.tasks)), proposer)
        self.live: LiveScores | None = None
        self._batches_view: LogView | None = None
        self._promoted_view: LogView | None = None

    @property
    def ledger(self):
        return self.promoter.ledger

    async def prepare(self) -> None:
        self._promoted_view = LogView(self, Topic.PROMOTED, self._apply_decision)
        self._batches_view = LogView(self, Topic.BATCHES, self._apply_manifest)
        for view in (LogView(self, Topic.PLAYBOOK, self._apply_version),
                     LogView(self, Topic.EVAL_RESULTS, self._apply_result), self._promoted_view, self._batches_view):
            await view.start()
        if self.promoter.rule.canary_share > 0:
            self.live = LiveScores(self)
            await self.live.start()

    # ------------------------------------------------------------------------------------------ views

    def _apply_version(self, record: ConsumerRecord) -> None:
        version = self.read_state(record, PlaybookVersion)
        if version is not None:
            self.promoter.apply_version(version)

    def _apply_manifest(self, record: ConsumerRecord) -> None:
        manifest = self.read_state(record, BatchManifest)
        if manifest is not None:
            self.promoter.apply_manifest(manifest)

    def _apply_result(self, record: ConsumerRecord) -> None:
        result = self.read_state(record, EvalResult)
        if result is not None:
            self.promoter.apply_result(result)

    def _apply_decision(self, record: ConsumerRecord) -> None:
        assert self._promoted_view is not None
        take_decision(self, self._promoted_view, record, self.promoter.apply_decision)

    # ------------------------------------------------------------------------------------------ the loop

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.promoter.forget_requests()
        for view in self.views:
            await view.catch_up()

    async def handle(self, record: ConsumerRecord, value: bytes | None) -> None:
        self.done(record)  # results are taken from the eval-results view; the group only gives ownership

    async def tick(self, now: float) -> None:
        for playbook_id in self.promoter.playbooks():
            if self.owns_key(playbook_id):
                live = self.live.scores.get(playbook_id, []) if self.live is not None else None
                effects = await self.promoter.advance(playbook_id, live, utc_now(), self._catch_up_batches)
                await perform(self, effects, self._write_decision)

    async def _catch_up_batches(self) -> None:
        assert self._batches_view is not None
        await self._batches_view.catch_up()

    async def _write_decision(self, publish: Publish) -> bool:
        assert self._promoted_view is not None
        decision = await write_decision(self, self._promoted_view, publish)
        if decision is not None:
            log.info("%s v%s: %s (%s)", decision.playbook_id, decision.candidate_version, decision.action,
                     decision.reason)
        return decision is not None
