"""The review side's reads and writes on the broker: a playbook's versions, promotion and review decisions read from
their topics (:class:`ReviewSnapshot`), a decision written to ``review``, and the records behind an entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from combee_core.ingest.redaction import RedactionConfig, Redactor
from combee_core.log_order import valid_versions
from combee_core.models import CombeeModel, PlaybookVersion, PromotionDecision, Reflection, ReviewDecision, Trace
from combee_core.promote.promotion import load_ledger
from combee_core.serve.review import ReviewInputError, ReviewState, review_state
from combee_core.serve.served import served_playbook
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.readable import readable

M = TypeVar("M", bound=CombeeModel)


@dataclass(frozen=True)
class ReviewSnapshot:
    """One playbook as its topics hold it now, and the review fold over it."""

    playbook_id: str
    versions: list[PlaybookVersion]
    promotions: list[PromotionDecision]
    decisions: list[ReviewDecision]
    served: PlaybookVersion | None
    previous: PlaybookVersion | None
    """The version served before ``served`` (with promotion: the previous pointer; else its parent)."""
    state: ReviewState

    def version(self, number: int) -> PlaybookVersion:
        for version in self.versions:
            if version.version == number:
                return version
        raise ReviewInputError(f"{self.playbook_id} has no version {number} (it has 1..{len(self.versions)})")


async def _models(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, topic: Topic,
                  model: type[M]) -> list[M]:
    from streams.topology.topic_reader import read_topic  # here: `import streams.cli` must not load aiokafka

    return readable(await read_topic(bootstrap, profile, settings.topic(topic)), model)


async def playbook_ids(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> list[str]:
    """Every playbook with a version on the ``playbook`` topic."""
    versions = await _models(settings, bootstrap, profile, Topic.PLAYBOOK, PlaybookVersion)
    return sorted({version.playbook_id for version in versions})


def served_of(settings: CombeeSettings, playbook_id: str, versions: Sequence[PlaybookVersion],
              promotions: Sequence[PromotionDecision]) -> PlaybookVersion | None:
    """The version agents are served before review, by the followers' own rule (``served_playbook``)."""
    return served_playbook(playbook_id, promotion=settings.promotion, newest=versions[-1] if versions else None,
                           parents={v.version: v.parent_version for v in versions}, ledger=load_ledger(promotions))


async def read_snapshot(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                        playbook_id: str) -> ReviewSnapshot:
    """Read the playbook's versions, the promotion decisions and the review log, and fold them."""
    versions = [v for v in valid_versions(await _models(settings, bootstrap, profile, Topic.PLAYBOOK,
                                                        PlaybookVersion)) if v.playbook_id == playbook_id]
    promotions = [d for d in await _models(settings, bootstrap, profile, Topic.PROMOTED, PromotionDecision)
                  if d.playbook_id == playbook_id]
    decisions = [d for d in await _models(settings, bootstrap, profile, Topic.REVIEW, ReviewDecision)
                 if d.playbook_id == playbook_id]
    served = served_of(settings, playbook_id, versions, promotions)
    ledger = load_ledger([])
    counted = [d for d in promotions if ledger.apply(d)]
    history = ledger.served_history.get(playbook_id, [])
    by_number = {v.version: v for v in versions}
    if served is None:
        previous = None
    elif len(history) >= 2 and history[-1] == served.version:
        previous = by_number.get(history[-2])
    else:
        previous = by_number.get(served.parent_version)
    return ReviewSnapshot(playbook_id=playbook_id, versions=versions, promotions=counted, decisions=decisions,
                          served=served, previous=previous,
                          state=review_state(playbook_id, versions, served, decisions))


async def write_decision(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                         decision: ReviewDecision) -> None:
    """Append ``decision`` to the ``review`` topic (acknowledged by every replica)."""
    from streams.topology.kafka_clients import start_producer

    producer = await start_producer(bootstrap, profile)
    try:
        await producer.send_and_wait(settings.topic(Topic.REVIEW), decision.to_json_bytes(),
                                     key=decision.playbook_id.encode())
    finally:
        await producer.stop()


async def provenance(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                     trace_ids: Sequence[str]) -> tuple[list[Reflection], list[Trace]]:
    """The reflections and traces of ``trace_ids`` (a version's lineage), read from their topics, as the page may
    show them: redacted by the pipeline's own redactor (``traces`` holds raw traces unless
    ``redact_before_produce``; a lineage names the redacted ids)."""
    wanted = set(trace_ids)
    redaction = RedactionConfig.from_settings(settings)
    reflections = [r for r in await _models(settings, bootstrap, profile, Topic.REFLECTIONS, Reflection)
                   if r.trace_id in wanted]  # made from redacted traces
    traces = []
    for record in await _read(settings, bootstrap, profile, Topic.TRACES):
        try:
            trace = Trace.from_json_bytes(record)
            if Redactor(redaction).identifier(trace.trace_id) in wanted:  # redact only the ones shown
                traces.append(Redactor(redaction).trace(trace))
        except ValueError:  # RedactionError included
            continue  # an invalid trace is a dead letter of the run, not provenance
    return reflections, traces


async def _read(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, topic: Topic) -> list[bytes]:
    from streams.topology.topic_reader import read_topic

    return [record.value for record in await read_topic(bootstrap, profile, settings.topic(topic))]
