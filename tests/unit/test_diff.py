"""Version diffing: identical runs, and the first playbook / version / op / entry where two runs part."""

from __future__ import annotations

from datetime import datetime, timezone

from combee_core.models import (
    AddOp,
    AppliedOperation,
    Challenge,
    OutcomeTally,
    PlaybookEntry,
    PlaybookVersion,
    VersionStats,
)
from combee_core.runs.diff import diff_versions

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def version(playbook_id: str, number: int, contents: list[str], lineage: list[str] | None = None,
            published_at: datetime = NOW) -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"gen-{i:05d}", section="general", content=c, created_version=1,
                             updated_version=number) for i, c in enumerate(contents, start=1)]
    operations = [AppliedOperation(operation=AddOp(section="general", content=contents[-1]), outcome="applied",
                                   entry_id=entries[-1].entry_id)]
    lineage = lineage or [f"t-{number}"]
    return PlaybookVersion(
        playbook_id=playbook_id, version=number, parent_version=number - 1, batch_id=number - 1, entries=entries,
        next_entry_number=len(entries) + 1, operations=operations, lineage=lineage,
        stats=VersionStats(batch_size=1, k=1, p=1),
        content_hash=PlaybookVersion.compute_hash(playbook_id, number, number - 1, number - 1, entries, operations,
                                                  lineage),
        published_at=published_at,
    )


def run(*playbooks: str, change: tuple[str, int] | None = None) -> list[PlaybookVersion]:
    out = []
    for pb in playbooks:
        contents: list[str] = []
        for n in range(1, 4):
            text = f"lesson {n}" + (" changed" if change == (pb, n) else "")
            contents.append(text)
            out.append(version(pb, n, list(contents)))
    return out


def test_identical_runs_ignore_timestamps_and_order():
    a = run("alpha", "beta")
    b = [v.model_copy(update={"published_at": datetime(2030, 1, 1, tzinfo=timezone.utc)}) for v in reversed(a)]
    report = diff_versions(a, b + b[:2])  # a re-published version is not a difference
    assert report.identical and report.identical_versions == 6 and report.versions_b == 6
    assert report.describe().startswith("identical: 6 version(s) over 2 playbook(s)")


def test_first_difference_names_playbook_version_op_and_entry():
    report = diff_versions(run("alpha", "beta"), run("alpha", "beta", change=("beta", 2)))
    assert not report.identical
    first = report.first
    assert (first.playbook_id, first.version) == ("beta", 2)
    assert report.identical_versions == 3  # v1 of both, v2 of alpha
    aspects = {d.aspect: d for d in first.differences}
    assert set(aspects) == {"operation", "entry"}
    assert aspects["operation"].op_index == 0
    assert "'lesson 2' -> applied vs ADD general 'lesson 2 changed'" in aspects["operation"].detail
    assert aspects["entry"].entry_id == "gen-00002" and "content 'lesson 2' vs 'lesson 2 changed'" in \
        aspects["entry"].detail
    text = report.describe()
    assert "first difference: playbook beta version 2" in text and "op #0" in text


def test_missing_versions_and_lineage_differences():
    a = run("alpha")
    report = diff_versions(a, a[:2])
    assert (report.first.playbook_id, report.first.version) == ("alpha", 3)
    assert report.first.differences[0].aspect == "missing" and "run B has no such version" in report.describe()

    b = [*a[:2], version("alpha", 3, ["lesson 1", "lesson 2", "lesson 3"], lineage=["t-3", "t-x"])]
    lineage = {d.aspect: d for d in diff_versions(a, b).first.differences}["lineage"]
    assert "only in B: t-x" in lineage.detail


def test_conflicting_republished_version_is_noted():
    a = run("alpha")
    other = version("alpha", 2, ["lesson 1", "other"])
    report = diff_versions(a, [*a, other])
    assert report.identical and any("published twice with different content" in n for n in report.notes)


def test_a_difference_only_in_the_outcome_baseline_or_a_pending_challenge_is_named() -> None:
    a = run("alpha")
    last = a[-1]
    baseline = OutcomeTally(successes=1980, failures=990)
    challenge = Challenge(entry_id="gen-00001", entry_content="lesson 1", section="general", content="not lesson 1",
                          support=2, first_version=2, last_version=3)

    def rehashed(**update: object) -> PlaybookVersion:
        changed = last.model_copy(update=update)
        return changed.model_copy(update={"content_hash": PlaybookVersion.compute_hash(
            changed.playbook_id, changed.version, changed.parent_version, changed.batch_id, changed.entries,
            changed.operations, changed.lineage, changed.baseline, changed.challenges)})

    report = diff_versions(a, [*a[:-1], rehashed(baseline=baseline)])
    assert report.first is not None and [d.aspect for d in report.first.differences] == ["baseline"]
    assert "outcome baseline 0/0 vs 1980/990" in report.describe()
    report = diff_versions([*a[:-1], rehashed(challenges=[challenge])],
                           [*a[:-1], rehashed(challenges=[challenge.model_copy(update={"support": 3})])])
    assert report.first is not None and [d.aspect for d in report.first.differences] == ["challenge"]
    assert "gen-00001 by 'not lesson 1' (support 2, v2-v3) vs gen-00001 by 'not lesson 1' (support 3" in \
        report.describe()
