"""Playbook versions: the whole playbook, what changed, where it came from."""

from __future__ import annotations

import hashlib
from typing import Literal

import orjson
from pydantic import Field

from combee_core.models.base import (
    SCHEMA_VERSION,
    CombeeModel,
    EntryId,
    InsightText,
    PlaybookId,
    SectionName,
    Timestamp,
)
from combee_core.models.curation import CurationState
from combee_core.models.operations import AppliedOperation


class OutcomeTally(CombeeModel):
    """Decayed counts of trace outcomes, in thousandths of a trace (integers, so a replay reproduces them byte for
    byte): each version first multiplies them by the decay (rounding down), then adds its batch's traces
    (``combee_core.playbook.outcomes``)."""

    successes: int = Field(default=0, ge=0)
    failures: int = Field(default=0, ge=0)


class Challenge(CombeeModel):
    """A correction pending against an entry: an ADD the judge found contradicting it (or matched to it on closeness
    alone, unconfirmed: a rewording or a reversal it cannot see), not yet outweighing it. Its
    support (distinct traces, summed over the versions that restated it) accumulates until it supersedes the entry
    (``combee_core.playbook.challenges``)."""

    entry_id: EntryId = Field(description="The entry the correction contradicts.")
    entry_content: InsightText = Field(description="That entry's text when challenged (a new text ends it).")
    section: SectionName
    content: InsightText = Field(description="The correction, in its first wording.")
    support: int = Field(ge=1, description="Distinct traces behind its restatements, summed over versions.")
    first_version: int = Field(ge=1)
    last_version: int = Field(ge=1)
    why: str = Field(default="", max_length=500, description="The judge's reason for calling it a contradiction.")


MAX_ALIASES = 8
"""Most aliases one entry keeps (``combee_core.playbook.aliases``): each costs one more comparison per ADD."""


class PlaybookEntry(CombeeModel):
    """One line of the playbook."""

    entry_id: EntryId
    section: SectionName
    content: InsightText
    helpful: int = Field(default=0, ge=0)
    harmful: int = Field(default=0, ge=0)
    used_helpful: int = Field(default=0, ge=0, description="Distinct traces whose agent used this entry and whose "
                              "reflection tagged it helpful (evidence of use: what eviction ranks by).")
    used_harmful: int = Field(default=0, ge=0, description="Distinct traces whose agent used this entry and whose "
                              "reflection tagged it harmful.")
    outcome: OutcomeTally = Field(default_factory=OutcomeTally, description="Outcomes of the traces whose agent "
                                  "used this entry (decayed; combee_core.playbook.outcomes).")
    created_version: int = Field(ge=0)
    updated_version: int = Field(ge=0)
    aliases: list[InsightText] = Field(default_factory=list, max_length=MAX_ALIASES, description=(
        "Wordings folded into this entry on closeness in meaning alone, which no reducer call confirmed: later ADDs "
        "are matched against them too, and such a match raises no counter (combee_core.playbook.aliases). Never "
        "shown to agents."))


class VersionStats(CombeeModel):
    """Measurements of how a version was made. Timing fields are excluded from the content hash."""

    batch_size: int = Field(ge=0)
    k: int = Field(ge=0)
    p: int = Field(ge=0)
    levels: int = Field(default=1, ge=0)
    llm_calls: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    missing_copies: int = Field(default=0, ge=0)
    max_staleness: int = Field(default=0, ge=0, description="Largest (base_version - trace.playbook_version).")
    delay_s: float = Field(default=0.0, ge=0.0, description="Batch closed -> version published, wall seconds.")
    llm_critical_path_s: float = Field(
        default=0.0, ge=0.0,
        description="Sum over scan levels of the slowest LLM call (modelled latency in virtual time).",
    )
    playbook_tokens: int = Field(default=0, ge=0)
    merged_without_call: int = Field(default=0, ge=0, description="Scan groups whose partials did not conflict and "
                                     "were merged deterministically instead of by a reducer call.")


class PlaybookVersion(CombeeModel):
    """A published playbook version: the whole playbook, what changed, and where it came from."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    version: int = Field(ge=1)
    parent_version: int = Field(ge=0)
    batch_id: int = Field(ge=0)
    entries: list[PlaybookEntry]
    next_entry_number: int = Field(ge=1, description="Entry-id counter after this version (ids are never reused).")
    operations: list[AppliedOperation]
    lineage: list[str] = Field(description="Sorted trace_ids whose reflections made this version.")
    baseline: OutcomeTally = Field(default_factory=OutcomeTally, description="Outcomes of all the playbook's traces "
                                   "with one, used entries or not (decayed): what outcome credit compares with.")
    challenges: list[Challenge] = Field(default_factory=list, description="Corrections pending against entries, "
                                        "sorted by entry, first version and text.")
    stats: VersionStats
    curation: CurationState = Field(default_factory=CurationState, description="What curation carries to the next "
                                    "version (the rolling change budget's recent changes, pairs kept apart).")
    content_hash: str = Field(description="sha256 of the deterministic fields (all but stats timing).")
    published_at: Timestamp

    @staticmethod
    def compute_hash(
        playbook_id: str,
        version: int,
        parent_version: int,
        batch_id: int,
        entries: list[PlaybookEntry],
        operations: list[AppliedOperation],
        lineage: list[str],
        baseline: OutcomeTally | None = None,
        challenges: list[Challenge] | None = None,
    ) -> str:
        """Hash of everything a reproducible rerun must reproduce byte for byte."""
        payload = {
            "playbook_id": playbook_id,
            "version": version,
            "parent_version": parent_version,
            "batch_id": batch_id,
            # an entry without aliases hashes as before aliases existed
            "entries": [e.model_dump(mode="json", exclude=None if e.aliases else {"aliases"}) for e in entries],
            "operations": [o.model_dump(mode="json") for o in operations],
            "lineage": lineage,
            "baseline": (baseline or OutcomeTally()).model_dump(mode="json"),
            "challenges": [c.model_dump(mode="json") for c in challenges or ()],
        }
        return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
