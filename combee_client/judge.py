"""The built-in LLM judge as an evaluator process (``combee judge``; docs/operations.md, "Gating on your own tasks
with the LLM judge"): :class:`~combee_core.judge.LLMJudge` is the score function of a
:class:`~combee_client.evaluator.Evaluator`, so it shares its consumer group, first-result semantics and error results.

    from combee_client.judge import JudgeEvaluator
    from combee_core.judge.settings import JudgeSettings

    judge = JudgeEvaluator(JudgeSettings.load({"judge_model": "openai/gpt-4o", "agent_model": "openai/gpt-4o-mini"}))
    await judge.run()  # until judge.stop()

Every call attempt of its two roles (``agent``, ``judge``) is a ``CallRecord`` on the run's ``llm-calls`` topic (and,
with ``record_file``, appended to that JSONL file); ``replay_file`` answers every call from such a file instead of
the models (a call it does not hold is an error result naming the call, never a model call).
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from combee_client.evaluator import Evaluator, EvaluatorMetrics
from combee_core.judge.calls import JudgeRoles
from combee_core.judge.score import EVALUATOR_NAME, LLMJudge
from combee_core.judge.settings import JudgeSettings
from combee_core.llm.record import CallIndex, CallStore, ReplayResponder
from combee_core.models import CallRecord
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.connection import client_kwargs

log = logging.getLogger(__name__)


class JudgeEvaluator:
    """An :class:`Evaluator` whose score function is the LLM judge, recording its calls (module docstring)."""

    def __init__(self, judge_settings: JudgeSettings, *, name: str = EVALUATOR_NAME, record_file: str | None = None,
                 replay_file: str | None = None, settings: CombeeSettings | None = None, **options: Any) -> None:
        """``options`` go to :class:`Evaluator` (``bootstrap``, ``topic_prefix``, ``concurrency``, ``timeout_s``...)."""
        self._store = CallStore(record_file) if record_file else None
        responder = ReplayResponder(CallIndex(CallStore(replay_file).load())) if replay_file else None
        self._producer: AIOKafkaProducer | None = None
        self._unrecorded = 0
        self.judge = LLMJudge(JudgeRoles(judge_settings.llm_config(), on_call=self._record, responder=responder))
        self.evaluator = Evaluator(self.judge.score, name=name, model=self.judge.evaluator_model, settings=settings,
                                   **options)

    @property
    def metrics(self) -> EvaluatorMetrics:
        return self.evaluator.metrics

    def stop(self) -> None:
        self.evaluator.stop()

    async def run(self, *, max_results: int | None = None) -> EvaluatorMetrics:
        """Answer evaluation requests until :meth:`stop`; returns the metrics (the calls' cost is logged)."""
        evaluator = self.evaluator
        self._producer = AIOKafkaProducer(acks="all", **client_kwargs(evaluator.bootstrap, evaluator.connection))
        await self._producer.start()
        try:
            return await evaluator.run(max_results=max_results)
        finally:
            await self._producer.stop()
            self._producer = None
            log.info("llm judge %s: %s", evaluator.name, self.judge.usage.line())

    async def _record(self, call: CallRecord) -> None:
        """One call attempt to the file and the ``llm-calls`` topic (keyed by its call key). A failed publish is
        counted and logged, never fatal: the record is an audit trail, the score does not depend on it."""
        if self._store is not None:
            self._store.append(call)
        if self._producer is None:
            return
        try:
            await self._producer.send(self.evaluator.settings.topic(Topic.LLM_CALLS), call.model_dump_json().encode(),
                                      key=call.key.encode())
        except KafkaError as error:
            self._unrecorded += 1
            log.warning("llm judge: could not record call %s (%d not recorded): %s", call.key[:12],
                        self._unrecorded, error)
