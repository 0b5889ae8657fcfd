"""GEPA with Combee Streams as its proposer: GEPA's reflective dataset goes to the pipeline as traces, and the new
playbook version (ACE text) comes back as the component's new text.

GEPA (PyPI ``gepa``) calls ``custom_candidate_proposer(candidate, reflective_dataset, components_to_update)`` from
its optimisation loop and expects ``{component: new text}``. :class:`CombeeProposer` is that callable. Per component
(one playbook each, ``<playbook_prefix>-<component>``), it:

1. makes the playbook hold the candidate GEPA chose to mutate: when its latest version's text differs (GEPA picks
   parents from its Pareto front, not only the newest), the candidate is imported as the next version
   (``combee playbook import``);
2. publishes one :class:`~combee_core.models.Trace` per reflective-dataset record (GEPA's default keys ``Inputs``,
   ``Generated Outputs``, ``Feedback``, and ``Score`` when present);
3. waits until every one of them is in a version's lineage or dead-lettered, and returns that version's ACE text.

GEPA's loop is synchronous; the proposer runs its broker work on an event loop it is given (the one the pipeline
runs on), so call :func:`gepa.optimize` from another thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from combee_core.errors import CombeeError
from combee_core.models import DeadLetter, PlaybookVersion, Trace, utc_now
from combee_core.runs.ace_format import parse_ace, render_ace
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.runs.playbook_io import import_playbook, read_versions
from streams.topology.produce import produce_traces
from streams.topology.topic_reader import read_topic

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ProposalTimeout(CombeeError, TimeoutError):
    """The pipeline did not turn a proposal's traces into a version in time."""


def record_text(record: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        if key in record and record[key] is not None:
            value = record[key]
            return value if isinstance(value, str) else repr(value)
    return ""


def record_to_trace(record: Mapping[str, Any], *, playbook_id: str, playbook_version: int, trace_id: str) -> Trace:
    """One reflective-dataset record as a trace (text fields cut to the trace limits)."""
    from combee_core import limits

    score = record.get("Score", record.get("score"))
    return Trace(
        trace_id=trace_id,
        playbook_id=playbook_id,
        playbook_version=playbook_version,
        agent_id="gepa",
        task_id=trace_id.rsplit("-", 1)[0],
        input=record_text(record, "Inputs", "inputs", "input")[: limits.MAX_TRACE_TEXT_CHARS],
        output=record_text(record, "Generated Outputs", "outputs", "output")[: limits.MAX_TRACE_TEXT_CHARS],
        feedback=record_text(record, "Feedback", "feedback")[: limits.MAX_FEEDBACK_CHARS],
        score=float(score) if isinstance(score, (int, float)) else None,
        created_at=utc_now(),
    )


class CombeeProposer:
    """A GEPA ``custom_candidate_proposer`` backed by a running Combee Streams pipeline."""

    def __init__(self, settings: CombeeSettings, bootstrap: str, profile: BrokerProfile,
                 loop: asyncio.AbstractEventLoop, *, playbook_prefix: str = "gepa", timeout_s: float = 300.0) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.profile = profile
        self.loop = loop
        self.playbook_prefix = playbook_prefix
        self.timeout_s = timeout_s
        self.proposals = 0
        self.versions: list[PlaybookVersion] = []
        """Every version a proposal returned, in order."""

    def playbook_id(self, component: str) -> str:
        return _UNSAFE.sub("-", f"{self.playbook_prefix}-{component}").strip("-.")[:100]

    def __call__(self, candidate: dict[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        future = asyncio.run_coroutine_threadsafe(
            self.propose(candidate, reflective_dataset, components_to_update), self.loop)
        return future.result(self.timeout_s * max(1, len(components_to_update)) + 30)

    async def propose(self, candidate: dict[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                      components_to_update: list[str]) -> dict[str, str]:
        self.proposals += 1
        texts: dict[str, str] = {}
        for component in components_to_update:
            version = await self._propose_one(component, candidate.get(component, ""),
                                              list(reflective_dataset.get(component, ())))
            self.versions.append(version)
            texts[component] = render_ace(version.entries)
        return texts

    async def _propose_one(self, component: str, text: str, records: list[Mapping[str, Any]]) -> PlaybookVersion:
        playbook_id = self.playbook_id(component)
        current = await self._latest(playbook_id)
        wanted = parse_ace(text).entries(1) if text.strip() else []
        if render_ace(wanted) != render_ace(current.entries if current is not None else []):
            seeded = await import_playbook(self.settings, self.bootstrap, self.profile, playbook_id, wanted)
            current = seeded.seeded.version
        if not records:
            if current is None:
                raise ValueError(f"no reflective records for {component} and no version of {playbook_id} yet")
            return current
        version_number = current.version if current is not None else 0
        tag = hashlib.sha256(f"{time.time_ns()}|{self.proposals}".encode()).hexdigest()[:10]
        traces = [record_to_trace(record, playbook_id=playbook_id, playbook_version=version_number,
                                  trace_id=f"gepa-{tag}-{index}") for index, record in enumerate(records)]
        await produce_traces(self.settings, self.bootstrap, self.profile, traces)
        return await self._wait_for_lineage(playbook_id, {t.trace_id for t in traces})

    async def _latest(self, playbook_id: str) -> PlaybookVersion | None:
        mine = [v for v in await read_versions(self.settings, self.bootstrap, self.profile)
                if v.playbook_id == playbook_id]
        return mine[-1] if mine else None

    async def _wait_for_lineage(self, playbook_id: str, trace_ids: set[str]) -> PlaybookVersion:
        deadline = time.monotonic() + self.timeout_s
        while True:
            versions = [v for v in await read_versions(self.settings, self.bootstrap, self.profile)
                        if v.playbook_id == playbook_id]
            missing = trace_ids - {t for v in versions for t in v.lineage}
            if missing:
                dead = await read_topic(self.bootstrap, self.profile, self.settings.topic(Topic.DLQ))
                missing -= {DeadLetter.from_json_bytes(r.value).trace_id for r in dead}
            if not missing and versions:
                return versions[-1]
            if time.monotonic() >= deadline:
                raise ProposalTimeout(f"{len(missing)} of {len(trace_ids)} trace(s) of {playbook_id} not in a "
                                      f"version after {self.timeout_s:.0f} s")
            await asyncio.sleep(0.3)
