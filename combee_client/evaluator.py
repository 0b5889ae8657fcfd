"""An evaluator process from one function: ``score(playbook, task) -> float`` (sync or async) answers the promoter's
evaluation requests (docs/protocol.md, "Writing an evaluator"; docs/operations.md, "Gating on your own tasks").

    from combee_client.evaluator import run_evaluator

    def score(playbook, task):  # playbook.render(), playbook.entries; task.input, task.expected, task.rubric
        return 1.0 if my_agent(playbook.render(), task.input) == task.expected else 0.0

    run_evaluator(score, name="my-evaluator", model="my-agent-v3")  # blocks; COMBEE_KAFKA_BOOTSTRAP, ..._PREFIX

Every process of one ``name`` shares the consumer group ``<prefix>evaluator.<name>`` on ``eval-requests``, so each
request is answered once; ``concurrency`` bounds the calls in flight per process (a sync function runs in a thread).
A function that calls models may return ``Scored(score, usage)`` (``combee_core.promote.evaluation``): the result
then carries what the calls cost. A call that raises, returns no number in [0, 1], or outlives ``timeout_s`` is
answered with an ``error`` result (the promoter then rejects the candidate with that reason, instead of waiting). A
request that cannot be read is a dead letter with the reason. Offsets are committed once the fetch's results are on
the broker, so a crash answers a request again rather than never; the promoter keeps the first result of each
(content, task). Metrics: :class:`EvaluatorMetrics` (``Evaluator.metrics``), logged every ``log_every_s``.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from combee_core import limits
from combee_core.connection import KafkaConnection
from combee_core.errors import CombeeError, one_line
from combee_core.models import DeadLetter, EvalRequest, HeldOutTask, utc_now
from combee_core.promote.evaluation import (
    AnsweredRequests,
    CandidatePlaybook,
    Scored,
    answer,
    request_playbook,
    request_task,
)
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.connection import client_kwargs
from streams.broker.group_leave import leave_on_stop

log = logging.getLogger(__name__)

ScoreFunction = Callable[[CandidatePlaybook, HeldOutTask], float | Scored | Awaitable[float] | Awaitable[Scored]]
"""``score(playbook, task)``: a number in [0, 1], or a :class:`Scored` with what its model calls cost."""


class EvaluatorError(CombeeError):
    """An evaluator that cannot start (no broker, a bad name)."""


@dataclass
class EvaluatorMetrics:
    """What an evaluator process did since it started."""

    requests: int = 0
    scored: int = 0
    errors: int = 0
    """Error results: the function raised, returned no score, or timed out."""
    repeats: int = 0
    """Requests this process had answered already (delivered again), not scored twice."""
    unreadable: int = 0
    """Records that are no ``EvalRequest`` (dead letters)."""
    in_flight: int = 0
    score_seconds: float = 0.0
    """Wall seconds spent in the score function, summed."""
    slowest_s: float = 0.0
    by_error: dict[str, int] = field(default_factory=dict)
    """Error results by the exception's type."""

    def line(self) -> str:
        mean = self.score_seconds / max(1, self.scored + self.errors)
        return (f"{self.requests} requests: {self.scored} scored, {self.errors} errors, {self.repeats} repeats, "
                f"{self.unreadable} unreadable; {self.in_flight} in flight; {mean:.3f} s mean, {self.slowest_s:.3f} "
                f"s slowest")


class Evaluator:
    """The evaluator process of one score function (see the module docstring); :meth:`run` until :meth:`stop`."""

    def __init__(self, score: ScoreFunction, *, name: str, model: str, bootstrap: str | None = None,
                 topic_prefix: str | None = None, group: str | None = None, concurrency: int = 4,
                 timeout_s: float | None = None, settings: CombeeSettings | None = None,
                 connection: KafkaConnection | None = None, log_every_s: float = 60.0) -> None:
        """Settings not given come from the ``COMBEE_*`` environment (``CombeeSettings``): the broker, the topic
        prefix and the ``COMBEE_KAFKA_*`` security settings (``connection`` overrides them)."""
        settings = settings if settings is not None else CombeeSettings.load()
        self.bootstrap = bootstrap or settings.kafka_bootstrap or ""
        if not self.bootstrap:
            raise EvaluatorError("no broker: pass bootstrap= or set COMBEE_KAFKA_BOOTSTRAP")
        if concurrency < 1:
            raise EvaluatorError(f"concurrency must be at least 1, got {concurrency}")
        self.score = score
        self.name = name
        self.model = model
        self.settings = settings.model_copy(update={"topic_prefix": topic_prefix}) if topic_prefix is not None \
            else settings
        self.group = group or f"{self.settings.topic_prefix}evaluator.{name}"
        self.connection = connection if connection is not None else self.settings.kafka
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.log_every_s = log_every_s
        self.metrics = EvaluatorMetrics()
        self._answered = AnsweredRequests()
        self._slots = asyncio.Semaphore(concurrency)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, max_results: int | None = None) -> EvaluatorMetrics:
        """Answer requests until :meth:`stop` (or ``max_results`` answers); returns the metrics."""
        connection = self.connection
        consumer = AIOKafkaConsumer(self.settings.topic(Topic.EVAL_REQUESTS), group_id=self.group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=6000, heartbeat_interval_ms=1000, fetch_max_wait_ms=500,
                                    **client_kwargs(self.bootstrap, connection))
        producer = AIOKafkaProducer(acks="all", **client_kwargs(self.bootstrap, connection))
        await producer.start()
        try:
            await consumer.start()
            try:
                await self._loop(consumer, producer, max_results)
            finally:
                leave_on_stop(consumer)  # on Tansu too (its first generation is 0): the next evaluator need not wait
                await consumer.stop()
        finally:
            await producer.stop()
        log.info("evaluator %s stopped: %s", self.name, self.metrics.line())
        return self.metrics

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, max_results: int | None) -> None:
        logged = time.monotonic()
        answered = 0
        while not self._stop.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=self.concurrency * 4)
            records = [record for batch in batches.values() for record in batch]
            if records:
                sent = await asyncio.gather(*(self._take(record, producer) for record in records))
                await producer.flush()
                await consumer.commit()
                answered += sum(sent)
            if time.monotonic() - logged >= self.log_every_s:
                logged = time.monotonic()
                log.info("evaluator %s: %s", self.name, self.metrics.line())
            if max_results is not None and answered >= max_results:
                return

    async def _take(self, record: ConsumerRecord, producer: AIOKafkaProducer) -> int:
        """Answer one record (1 when a result was sent)."""
        self.metrics.requests += 1
        try:
            request = EvalRequest.from_json_bytes(record.value)
        except ValueError as error:
            self.metrics.unreadable += 1
            await self._dead_letter(record, error, producer)
            return 0
        if request.request_id in self._answered:
            self.metrics.repeats += 1
            return 0
        outcome = await self._scored(request)
        result = answer(request, outcome, evaluator=self.name, evaluator_model=self.model, now=utc_now())
        if result.error:
            self.metrics.errors += 1
            kind = type(outcome).__name__ if isinstance(outcome, BaseException) else "ScoreError"
            self.metrics.by_error[kind] = self.metrics.by_error.get(kind, 0) + 1
            log.warning("evaluator %s: %s on %s: %s", self.name, request.playbook_id, request.task_id, result.error)
        else:
            self.metrics.scored += 1
        await producer.send(self.settings.topic(Topic.EVAL_RESULTS), result.to_json_bytes(),
                            key=request.playbook_id.encode())
        self._answered.add(request.request_id)
        return 1

    async def _scored(self, request: EvalRequest) -> float | Scored | BaseException:
        async with self._slots:
            self.metrics.in_flight += 1
            started = time.perf_counter()
            try:
                return await asyncio.wait_for(self._call(request_playbook(request), request_task(request)),
                                              self.timeout_s)
            except TimeoutError:
                return TimeoutError(f"the score function took more than {self.timeout_s} s")
            except Exception as error:  # the user's function: any failure is an error result, never a lost request
                return error
            finally:
                took = time.perf_counter() - started
                self.metrics.in_flight -= 1
                self.metrics.score_seconds += took
                self.metrics.slowest_s = max(self.metrics.slowest_s, took)

    async def _call(self, playbook: CandidatePlaybook, task: HeldOutTask) -> Any:
        if inspect.iscoroutinefunction(self.score):
            return await self.score(playbook, task)
        value = await asyncio.to_thread(self.score, playbook, task)
        return await value if inspect.isawaitable(value) else value

    async def _dead_letter(self, record: ConsumerRecord, error: ValueError, producer: AIOKafkaProducer) -> None:
        raw = record.value or b""
        head = raw[: limits.MAX_DEAD_LETTER_ORIGINAL_BYTES]
        try:
            text: str | None = head.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        letter = DeadLetter(stage=f"evaluator:{self.name}"[: limits.MAX_DEAD_LETTER_NAME_CHARS],
                            reason=f"unreadable evaluation request: {one_line(error)}"[
                                : limits.MAX_DEAD_LETTER_REASON_CHARS],
                            error_type=type(error).__name__, original_text=text, original_size=len(raw),
                            original_sha256=hashlib.sha256(raw).hexdigest(), truncated=len(raw) > len(head),
                            topic=record.topic, partition=record.partition, offset=record.offset,
                            occurred_at=utc_now())
        log.error("evaluator %s: %s (offset %d): a dead letter", self.name, letter.reason, record.offset)
        await producer.send(self.settings.topic(Topic.DLQ), letter.to_json_bytes(), key=letter.stage.encode())


def run_evaluator(score: ScoreFunction, *, name: str, model: str, **options: Any) -> EvaluatorMetrics:
    """Run an :class:`Evaluator` in this thread until SIGINT or SIGTERM; returns its metrics."""

    async def main() -> EvaluatorMetrics:
        evaluator = Evaluator(score, name=name, model=model, **options)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, evaluator.stop)
        return await evaluator.run()

    return asyncio.run(main())
