"""Check a run's invariants from what its topics hold: every trace sent is in exactly one version's lineage or in a
dead letter, versions are contiguous per playbook, and no version number or batch id has two contents."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from combee_core.log_order import valid_manifests, valid_versions
from combee_core.models import BatchManifest, DeadLetter, PlaybookVersion


@dataclass
class RunAudit:
    """What :func:`audit_run` found; :meth:`problems` is empty when every invariant holds."""

    traces_sent: int
    learned: int = 0
    dead_lettered: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    """playbook -> number of versions that count"""
    void_records: int = 0
    """Records of a number already taken (a fenced writer's), with the same content or not."""
    missing: list[str] = field(default_factory=list)
    in_several_lineages: list[str] = field(default_factory=list)
    not_contiguous: list[str] = field(default_factory=list)
    conflicting_versions: list[tuple[str, int]] = field(default_factory=list)
    conflicting_batches: list[tuple[str, int]] = field(default_factory=list)
    batched_not_accounted: list[str] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)
    """Where the missing traces are: each conflicting batch's manifests in log order (which of them counts, which
    missing traces each lists); a test harness may add what the broker says (reflections, committed offsets)."""

    def problems(self, *, fenced_writers: bool = False) -> list[str]:
        """Broken invariants. With ``fenced_writers`` (a run where paused workers woke up as zombies), a number with
        two contents is allowed when readers ignore the later one (the first record counts)."""
        found = []
        if self.missing:
            found.append(f"{len(self.missing)} trace(s) in no version and no dead letter, e.g. {self.missing[:3]}")
        if self.in_several_lineages:
            found.append(f"{len(self.in_several_lineages)} trace(s) in several versions' lineages, "
                         f"e.g. {self.in_several_lineages[:3]}")
        found += [f"versions not contiguous: {text}" for text in self.not_contiguous]
        if self.conflicting_versions and not fenced_writers:
            found.append(f"version numbers with two contents: {self.conflicting_versions[:5]}")
        if self.conflicting_batches and not fenced_writers:
            found.append(f"batch ids with two memberships: {self.conflicting_batches[:5]}")
        if self.batched_not_accounted:
            found.append(f"{len(self.batched_not_accounted)} batched trace(s) missing from their batch's version "
                         f"and from the dead letters, e.g. {self.batched_not_accounted[:3]}")
        return found


def audit_run(
    sent: Iterable[str],
    versions: list[PlaybookVersion],
    manifests: list[BatchManifest],
    dead_letters: list[DeadLetter],
) -> RunAudit:
    """``versions`` and ``manifests`` are every record of their topics in log order (void ones included)."""
    sent = set(sent)
    audit = RunAudit(traces_sent=len(sent))
    counted = valid_versions(versions)
    batches = valid_manifests(manifests)
    audit.void_records = len(versions) - len(counted) + len(manifests) - len(batches)
    audit.conflicting_versions = _conflicts(((v.playbook_id, v.version), v.content_hash) for v in versions)
    audit.conflicting_batches = _conflicts(((m.playbook_id, m.batch_id), tuple(m.trace_ids)) for m in manifests)

    lineage = Counter(trace_id for version in counted for trace_id in version.lineage)
    dead = {letter.trace_id for letter in dead_letters if letter.trace_id}
    audit.learned = sum(1 for trace_id in sent if lineage[trace_id] == 1)
    audit.dead_lettered = sum(1 for trace_id in sent if trace_id in dead and not lineage[trace_id])
    audit.missing = sorted(t for t in sent if not lineage[t] and t not in dead)
    audit.in_several_lineages = sorted(t for t, n in lineage.items() if n > 1)

    by_playbook: dict[str, list[PlaybookVersion]] = defaultdict(list)
    for version in counted:
        by_playbook[version.playbook_id].append(version)
    for playbook_id, mine in sorted(by_playbook.items()):
        audit.versions[playbook_id] = len(mine)
        if [(v.parent_version, v.batch_id) for v in mine] != [(n, n) for n in range(len(mine))]:
            audit.not_contiguous.append(f"{playbook_id}: " + ", ".join(
                f"v{v.version}<-v{v.parent_version} (batch {v.batch_id})" for v in mine[:10]))

    version_of = {(v.playbook_id, v.batch_id): set(v.lineage) for v in counted}
    for manifest in batches:
        learned = version_of.get((manifest.playbook_id, manifest.batch_id))
        if learned is None:
            continue  # not reduced yet: ``missing`` reports its traces if the run is over
        audit.batched_not_accounted += [t for t in manifest.trace_ids if t not in learned and t not in dead]
    audit.explanation = explain_conflicts(manifests, set(audit.missing), audit.conflicting_batches)
    return audit


def explain_conflicts(manifests: list[BatchManifest], missing: set[str],
                      conflicting: list[tuple[str, int]]) -> list[str]:
    """For each conflicting batch id: its manifests in log order, whether each counts, their sizes and closing
    causes, and which ``missing`` traces each lists (and how many missing traces no manifest lists)."""
    counting = {id(m) for m in valid_manifests(manifests)}
    lines = []
    for playbook_id, batch_id in conflicting:
        for index, manifest in enumerate(m for m in manifests
                                         if (m.playbook_id, m.batch_id) == (playbook_id, batch_id)):
            listed = sorted(missing & set(manifest.trace_ids))
            lines.append(f"batch {playbook_id}/{batch_id} manifest #{index} "
                         f"({'counts' if id(manifest) in counting else 'void'}, n={manifest.n}, closed by "
                         f"{manifest.closed_by} at {manifest.closed_at:%H:%M:%S.%f}): {len(listed)} missing "
                         f"trace(s) {listed}; traces {manifest.trace_ids}")
    unlisted = sorted(missing - {t for m in manifests for t in m.trace_ids})
    if missing:
        lines.append(f"{len(unlisted)} missing trace(s) in no manifest at all: {unlisted[:20]}")
    return lines


def _conflicts(numbered: Iterable[tuple[tuple[str, int], object]]) -> list[tuple[str, int]]:
    contents: dict[tuple[str, int], set[object]] = defaultdict(set)
    for key, content in numbered:
        contents[key].add(content)
    return sorted(key for key, seen in contents.items() if len(seen) > 1)
