"""The promoter's views of ``playbook``, ``promoted``, ``batches`` and ``eval-results``, checkpointed so that a start
reads the records its decisions still rest on, not the whole logs (``combee_core.promote.promoter_resume``).

``playbook``, ``promoted`` and ``batches`` are numbered logs whose gates are the promoter's own (the versions gate,
the ledger's, the manifests gate) and whose resume points are the tracker's; ``eval-results`` resumes at the first
result of the oldest content still needed. Checkpoints go to ``checkpoints`` as ``promote/<topic>`` every
``view_checkpoint_every`` records, like every other stage's views.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.structs import ConsumerRecord

from combee_core.models import BatchManifest, EvalResult, PlaybookVersion, PromotionDecision, ViewCheckpoint
from combee_core.promote.processor import Promoter
from combee_core.promote.promoter_resume import ResumeTracker
from combee_core.topology import Topic
from streams.topology.runtime import Stage
from streams.topology.views.log_view import LogView
from streams.topology.views.numbered_log import NUMBERED, NumberedLog


class FirstResults:
    """The checkpointable state of the ``eval-results`` view (``log_view.CheckpointedState``)."""

    def __init__(self, tracker: ResumeTracker) -> None:
        self.tracker = tracker

    def checkpoint(self, position: int) -> tuple[int, dict[str, int], dict[str, int]]:
        return self.tracker.results_resume(position), {}, {}

    async def resume(self, checkpoint: ViewCheckpoint, fetch: Callable[[int], Awaitable[ConsumerRecord]]) -> None:
        """Nothing to load: the results are read again from the checkpoint's position."""


class PromoterViews:
    """The four views of one promoter stage."""

    def __init__(self, stage: Stage, promoter: Promoter) -> None:
        self.stage = stage
        self.promoter = promoter
        self.tracker = ResumeTracker(promoter)
        self.versions = self._numbered(Topic.PLAYBOOK, promoter.apply_version, promoter.versions_gate)
        self.decisions = self._numbered(Topic.PROMOTED, promoter.apply_decision, promoter.ledger.gate)
        self.batches = self._numbered(Topic.BATCHES, promoter.apply_manifest, promoter.batches_gate)
        self.results = LogView(stage, Topic.EVAL_RESULTS, self._apply_result, FirstResults(self.tracker),
                               catch_up_on_assign=True)

    def _numbered(self, topic: Topic, accept: Callable[[Any], bool], gate) -> NumberedLog:
        numbered: NumberedLog = NumberedLog(self.stage, topic, lambda value, offset: self._took(topic, value, offset),
                                            accept=accept, gate=gate, checkpointed=True)
        numbered.state.points = self.tracker.points[topic]
        return numbered

    async def start(self) -> None:
        for view in (self.versions, self.results, self.decisions, self.batches):
            await view.start()

    @property
    def applied(self) -> dict[str, int]:
        """Records each view read since start."""
        return {view.name: view.applied for view in (self.versions.view, self.decisions.view, self.batches.view,
                                                     self.results)}

    def _apply_result(self, record: ConsumerRecord) -> None:
        result = self.stage.read_state(record, EvalResult)
        if result is not None:
            self.promoter.apply_result(result)
            self.tracker.took_result(result, record.offset)

    def _took(self, topic: Topic, value: PlaybookVersion | PromotionDecision | BatchManifest, offset: int) -> None:
        playbook_id, number = NUMBERED[topic].number(value)
        self.tracker.took(topic, playbook_id, offset, number)
