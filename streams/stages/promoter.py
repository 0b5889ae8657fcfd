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
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.log_order import ContiguousNumbers
from combee_core.models import (
    BatchManifest,
    EvalResult,
    PlaybookVersion,
    PromotionDecision,
    ProposerModels,
    Usage,
    entries_digest,
    utc_now,
)
from combee_core.promotion import (
    CandidateCost,
    LiveScore,
    PromotionLedger,
    PromotionRule,
    ScoreCache,
    built_on_rejected,
    canary_verdict,
    decide,
    eval_requests,
)
from combee_core.tasks import build_suite
from streams.log_view import LogView
from streams.runtime import Stage, consumer_config

log = logging.getLogger(__name__)

STAGE = "promote"


class LiveScores:
    """With a canary: (playbook_version, score) of every trace, per playbook, in the order of its traces partition,
    read from the beginning of every partition of ``traces`` outside any group."""

    def __init__(self, stage: Stage) -> None:
        self._stage = stage
        self.scores: dict[str, list[LiveScore]] = {}
        self._closed = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        ctx = self._stage.ctx
        topic = ctx.settings.topic("traces")
        self._consumer = AIOKafkaConsumer(**consumer_config(ctx.bootstrap, ctx.profile, None))
        await self._consumer.start()
        await self._consumer._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public refresh
        tps = [TopicPartition(topic, p) for p in sorted(self._consumer.partitions_for_topic(topic) or {0})]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
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
        assert self._consumer is not None
        try:
            while not self._closed.is_set():
                batch = await self._consumer.getmany(timeout_ms=100)
                for records in batch.values():
                    for record in records:
                        self.take(record.value)
        finally:
            await self._consumer.stop()

    async def catch_up(self) -> None:
        """Nothing to wait for: a verdict counts the first traces of the log, whenever it is computed."""

    def close(self) -> None:
        self._closed.set()


def held_out_set(settings) -> tuple[str, tuple]:
    """(name, tasks) of the pinned held-out set: the suite's held-out split, which no training trace comes from."""
    suite = build_suite(families=settings.eval_suite_families, seed=settings.eval_suite_seed)
    return f"suite-{suite.seed}-{len(suite.families)}.held-out", suite.held_out


class PromoterStage(Stage):
    name = STAGE
    consumes = ("eval-results",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        self.rule = PromotionRule(epsilon=settings.promotion_epsilon, canary_share=settings.canary_share,
                                  canary_min_traces=settings.canary_min_traces)
        self.live: LiveScores | None = None
        self.task_set, self.tasks = held_out_set(settings)
        self.proposer = ProposerModels(reflector=settings.reflector_model, aggregator=settings.aggregator_model,
                                       reducer=settings.reducer_model)
        self.ledger = PromotionLedger()
        self.cache = ScoreCache()
        self.candidates: dict[str, dict[int, PlaybookVersion]] = {}
        self.costs: dict[str, dict[int, tuple[CandidateCost, int]]] = {}
        """Per playbook and version: its own cost (aggregate and reduce calls) and its batch id."""
        self.reflection_usage: dict[str, dict[int, Usage | None]] = {}
        """Per playbook and batch id: what the batch's reflections cost (from its manifest)."""
        self._batches = ContiguousNumbers[str]()
        self._batches_view: LogView | None = None
        self._versions = ContiguousNumbers[str](start=1)
        self._requested: set[tuple[str, str]] = set()
        self._promoted_view: LogView | None = None

    async def prepare(self) -> None:
        self._promoted_view = LogView(self, "promoted", self._apply_decision)
        self._batches_view = LogView(self, "batches", self._apply_manifest)
        for view in (LogView(self, "playbook", self._apply_version), LogView(self, "eval-results", self._apply_result),
                     self._promoted_view, self._batches_view):
            await view.start()
        if self.rule.canary_share > 0:
            self.live = LiveScores(self)
            await self.live.start()

    # ------------------------------------------------------------------------------------------ views

    def _apply_version(self, record: ConsumerRecord) -> None:
        version = self.read_state(record, PlaybookVersion)
        if version is None or not self._versions.accept(version.playbook_id, version.version):
            return
        self.costs.setdefault(version.playbook_id, {})[version.version] = (CandidateCost.of(version), version.batch_id)
        if version.version > self.ledger.last_decided(version.playbook_id):
            self.candidates.setdefault(version.playbook_id, {})[version.version] = version

    def _apply_manifest(self, record: ConsumerRecord) -> None:
        manifest = self.read_state(record, BatchManifest)
        if manifest is not None and self._batches.accept(manifest.playbook_id, manifest.batch_id):
            self.reflection_usage.setdefault(manifest.playbook_id, {})[manifest.batch_id] = manifest.reflection_usage

    def _apply_result(self, record: ConsumerRecord) -> None:
        result = self.read_state(record, EvalResult)
        if result is not None:
            self.cache.add(result)

    def _apply_decision(self, record: ConsumerRecord) -> None:
        decision = self.read_state(record, PromotionDecision)
        if decision is None:
            return
        assert self._promoted_view is not None
        counts = self.ledger.apply(decision)
        self._promoted_view.origin(record, (decision.playbook_id, decision.decision_id), counts)
        if counts and decision.candidate_version is not None:
            waiting = self.candidates.get(decision.playbook_id, {})
            for version in [v for v in waiting if v <= self.ledger.last_decided(decision.playbook_id)]:
                del waiting[version]

    # ------------------------------------------------------------------------------------------ the loop

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._requested.clear()
        for view in self.views:
            await view.catch_up()

    async def handle(self, record: ConsumerRecord, value: bytes | None) -> None:
        self.done(record)  # results are taken from the eval-results view; the group only gives ownership

    async def tick(self, now: float) -> None:
        for playbook_id in sorted(set(self.candidates) | {pb for pb in self.ledger.playbooks()
                                                          if self.ledger.canary(pb) is not None}):
            if self.owns_key(playbook_id):
                await self._advance(playbook_id)

    async def _scores(self, playbook_id: str, version: int, entries) -> tuple[float | None, str, str]:
        """The held-out score of this content, after requesting the tasks not yet evaluated (once per process)."""
        digest = entries_digest(entries)
        missing = self.cache.missing(digest, self.tasks)
        if missing and (playbook_id, digest) not in self._requested:
            self._requested.add((playbook_id, digest))
            for request in eval_requests(playbook_id, version, entries, self.task_set, missing, utc_now()):
                await self.ctx.send("eval-requests", f"{playbook_id}/{request.task_id}", request)
            self.ctx.count("eval_requests", len(missing))
            self.ctx.count("eval_cache_hits", len(self.tasks) - len(missing))
        return self.cache.score(digest, self.tasks)

    async def _costs(self, playbook_id: str, candidate_version: int) -> list[CandidateCost]:
        """The candidates after the served version up to this one (rejected ones included), each with its batch's
        reflections (a batch's manifest is on the log before its version: the view is caught up when one is
        missing, so the cost does not depend on timing)."""
        served = self.ledger.served_version(playbook_id)
        costs = self.costs.get(playbook_id, {})
        wanted = [costs[v] for v in sorted(costs) if served < v <= candidate_version]
        usage = self.reflection_usage.setdefault(playbook_id, {})
        if any(batch_id not in usage for _, batch_id in wanted):
            assert self._batches_view is not None
            await self._batches_view.catch_up()
        return [cost.plus(usage.get(batch_id)) for cost, batch_id in wanted]

    async def _write(self, decision: PromotionDecision) -> None:
        assert self._promoted_view is not None
        if not await self._promoted_view.write((decision.playbook_id, decision.decision_id), decision.to_json_bytes()):
            self.ctx.count("decisions_lost")
            log.warning("%s decision %d: another record took the id first; deciding again", decision.playbook_id,
                        decision.decision_id)
            return
        self.ctx.count(f"decisions.{decision.action}")
        log.info("%s v%s: %s (%s)", decision.playbook_id, decision.candidate_version, decision.action, decision.reason)

    async def _advance(self, playbook_id: str) -> None:
        """Decide the candidate in canary once the live traces are in, else the next undecided candidate once its
        held-out scores are in."""
        in_canary = self.ledger.canary(playbook_id)
        if in_canary is not None:
            if self.live is not None:
                verdict = canary_verdict(self.rule, self.ledger, playbook_id, self.live.scores.get(playbook_id, []),
                                         costs=await self._costs(playbook_id, in_canary.version), now=utc_now())
                if verdict is not None:
                    await self._write(verdict)
            return
        candidate = self.candidates.get(playbook_id, {}).get(self.ledger.last_decided(playbook_id) + 1)
        if candidate is None:
            return
        orphan = built_on_rejected(self.ledger, candidate, now=utc_now(), rule=self.rule)
        if orphan is not None:
            await self._write(orphan)
            return
        incumbent = self.ledger.served(playbook_id)
        inc_score, inc_error, _ = await self._scores(playbook_id, self.ledger.served_version(playbook_id),
                                                     list(incumbent.entries) if incumbent else [])
        score, error, evaluator_model = await self._scores(playbook_id, candidate.version, list(candidate.entries))
        error = error or inc_error
        if not error and (score is None or inc_score is None):
            return  # results still coming
        decision = decide(self.rule, self.ledger, candidate, candidate_score=score, incumbent_score=inc_score,
                          error=error, costs=await self._costs(playbook_id, candidate.version), task_set=self.task_set,
                          tasks=len(self.tasks), proposer=self.proposer, evaluator_model=evaluator_model,
                          now=utc_now())
        await self._write(decision)
