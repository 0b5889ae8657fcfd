"""An import (``combee playbook import``) carries curation's memory: the rolling change budget is not reset by it."""

from __future__ import annotations

from datetime import datetime, timezone

from combee_core.models import ChangedEntry, CurationState, KeptApart, PlaybookEntry, VersionChanges
from combee_core.runs.seed import seed_version

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def _entry(entry_id: str, content: str) -> PlaybookEntry:
    return PlaybookEntry(entry_id=entry_id, section="general", content=content, created_version=1, updated_version=1)


def test_an_import_keeps_the_rolling_history_and_the_kept_apart_pairs_of_kept_entries() -> None:
    first = seed_version("pb", [_entry("gen-00001", "Retry once."), _entry("gen-00002", "Cite the source.")], None,
                         target_batch_size=40, now=NOW).version
    memory = CurationState(
        recent_changes=[VersionChanges(version=1, changed=[ChangedEntry(entry_id="gen-00009", created_version=1,
                                                                        removed=True)])],
        kept_apart=[KeptApart(entry_id="gen-00001", content="Retry twice.", version=1),
                    KeptApart(entry_id="gen-00002", content="Quote the source.", version=1)])
    parent = first.model_copy(update={"curation": memory})
    second = seed_version("pb", [parent.entries[0]], parent, target_batch_size=40, now=NOW).version
    assert second.curation.recent_changes == memory.recent_changes
    assert second.curation.kept_apart == memory.kept_apart[:1]  # gen-00002 was not in the import
