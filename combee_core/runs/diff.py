"""Compare the playbook version sequences of two runs and say where they first part.

Versions are compared by ``content_hash`` (everything a reproducible rerun must reproduce: entries with their outcome
counts, operations, lineage, version numbers, batch id, the outcome baseline and the pending challenges; not
timestamps or timing stats). The first difference is the lowest version number at which some playbook differs
(ties: playbook id order); for it the report names the first operation, the first entry, the first lineage trace,
the baseline and the first pending challenge that differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from combee_core.models import AppliedOperation, Challenge, PlaybookEntry, PlaybookVersion

Aspect = Literal["missing", "batch", "lineage", "operation", "entry", "baseline", "challenge", "hash"]


@dataclass(frozen=True)
class Difference:
    """One way two versions differ."""

    aspect: Aspect
    detail: str
    entry_id: str | None = None
    op_index: int | None = None


@dataclass(frozen=True)
class VersionDifference:
    """The first version at which two runs differ, and how."""

    playbook_id: str
    version: int
    differences: tuple[Difference, ...]
    hash_a: str | None
    hash_b: str | None

    def describe(self) -> str:
        lines = [f"first difference: playbook {self.playbook_id} version {self.version} "
                 f"(hash {_short(self.hash_a)} vs {_short(self.hash_b)})"]
        lines += [f"  {d.aspect}: {d.detail}" for d in self.differences]
        return "\n".join(lines)


@dataclass(frozen=True)
class DiffReport:
    """Result of :func:`diff_versions`: how many versions match before the first difference, and that difference."""

    playbooks: tuple[str, ...]
    identical_versions: int
    versions_a: int
    versions_b: int
    first: VersionDifference | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def identical(self) -> bool:
        return self.first is None

    def describe(self) -> str:
        head = (f"{self.versions_a} vs {self.versions_b} version(s) over {len(self.playbooks)} playbook(s); "
                f"{self.identical_versions} identical before the first difference")
        if self.first is None:
            head = (f"identical: {self.versions_a} version(s) over {len(self.playbooks)} playbook(s), "
                    "same content hashes")
        return "\n".join([head, *self.notes, *([self.first.describe()] if self.first else [])])


def _short(value: str | None) -> str:
    return value[:12] if value else "-"


def by_playbook(versions: Sequence[PlaybookVersion]) -> tuple[dict[str, dict[int, PlaybookVersion]], list[str]]:
    """Versions per playbook and number; a version published twice with different content is noted."""
    grouped: dict[str, dict[int, PlaybookVersion]] = {}
    notes: list[str] = []
    for version in versions:
        mine = grouped.setdefault(version.playbook_id, {})
        known = mine.get(version.version)
        if known is not None and known.content_hash != version.content_hash:
            notes.append(f"{version.playbook_id} v{version.version} was published twice with different content")
            continue
        mine.setdefault(version.version, version)
    return grouped, notes


def diff_versions(a: Sequence[PlaybookVersion], b: Sequence[PlaybookVersion]) -> DiffReport:
    """Compare two runs' versions (any order; duplicates of one version collapse)."""
    runs_a, notes_a = by_playbook(a)
    runs_b, notes_b = by_playbook(b)
    playbooks = sorted(set(runs_a) | set(runs_b))
    notes = tuple([f"A: {n}" for n in notes_a] + [f"B: {n}" for n in notes_b])
    top = max((n for run in (runs_a, runs_b) for pv in run.values() for n in pv), default=0)
    identical = 0
    for number in range(1, top + 1):
        for playbook_id in playbooks:
            va = runs_a.get(playbook_id, {}).get(number)
            vb = runs_b.get(playbook_id, {}).get(number)
            if va is None and vb is None:
                continue
            if va is not None and vb is not None and va.content_hash == vb.content_hash:
                identical += 1
                continue
            first = VersionDifference(
                playbook_id=playbook_id,
                version=number,
                differences=tuple(compare_versions(va, vb)),
                hash_a=va.content_hash if va else None,
                hash_b=vb.content_hash if vb else None,
            )
            return DiffReport(tuple(playbooks), identical, _count(runs_a), _count(runs_b), first, notes)
    return DiffReport(tuple(playbooks), identical, _count(runs_a), _count(runs_b), None, notes)


def _count(run: dict[str, dict[int, PlaybookVersion]]) -> int:
    return sum(len(v) for v in run.values())


def compare_versions(a: PlaybookVersion | None, b: PlaybookVersion | None) -> list[Difference]:
    """What differs between two versions with the same playbook and number (either may be missing)."""
    if a is None or b is None:
        which = "A" if a is None else "B"
        return [Difference("missing", f"run {which} has no such version")]
    found: list[Difference] = []
    if (a.batch_id, a.parent_version) != (b.batch_id, b.parent_version):
        found.append(Difference("batch", f"batch {a.batch_id} (parent v{a.parent_version}) vs batch {b.batch_id} "
                                          f"(parent v{b.parent_version})"))
    if a.lineage != b.lineage:
        only_a = sorted(set(a.lineage) - set(b.lineage))
        only_b = sorted(set(b.lineage) - set(a.lineage))
        found.append(Difference("lineage", f"{len(a.lineage)} vs {len(b.lineage)} traces; only in A: "
                                           f"{_some(only_a)}; only in B: {_some(only_b)}"))
    op = first_operation_difference(a.operations, b.operations)
    if op is not None:
        found.append(op)
    entry = first_entry_difference(a.entries, b.entries)
    if entry is not None:
        found.append(entry)
    if a.baseline != b.baseline:
        found.append(Difference("baseline", f"outcome baseline {a.baseline.successes}/{a.baseline.failures} vs "
                                            f"{b.baseline.successes}/{b.baseline.failures} (successes/failures, "
                                            "thousandths of a trace)"))
    challenge = first_challenge_difference(a.challenges, b.challenges)
    if challenge is not None:
        found.append(challenge)
    if not found:
        found.append(Difference("hash", "content hashes differ but no compared field does (hash from another "
                                        "format version?)"))
    return found


def first_operation_difference(a: Sequence[AppliedOperation], b: Sequence[AppliedOperation]) -> Difference | None:
    for index in range(max(len(a), len(b))):
        oa = a[index] if index < len(a) else None
        ob = b[index] if index < len(b) else None
        if oa != ob:
            entry_id = (oa.entry_id if oa else None) or (ob.entry_id if ob else None)
            return Difference("operation", f"op #{index}: {_render_op(oa)} vs {_render_op(ob)}", entry_id, index)
    return None


def first_entry_difference(a: Sequence[PlaybookEntry], b: Sequence[PlaybookEntry]) -> Difference | None:
    entries_a = {e.entry_id: e for e in a}
    entries_b = {e.entry_id: e for e in b}
    order = [e.entry_id for e in a] + [e.entry_id for e in b if e.entry_id not in entries_a]
    for entry_id in order:
        ea, eb = entries_a.get(entry_id), entries_b.get(entry_id)
        if ea == eb:
            continue
        if ea is None or eb is None:
            side = "B" if ea is None else "A"
            present = ea or eb
            assert present is not None
            return Difference("entry", f"{entry_id} only in {side}: [{present.section}] {_clip(present.content)}",
                              entry_id)
        fields = [name for name in PlaybookEntry.model_fields if getattr(ea, name) != getattr(eb, name)]
        shown = ", ".join(f"{name} {_clip(str(getattr(ea, name)))!r} vs {_clip(str(getattr(eb, name)))!r}"
                          for name in fields)
        return Difference("entry", f"{entry_id}: {shown}", entry_id)
    if [e.entry_id for e in a] != [e.entry_id for e in b]:
        return Difference("entry", "same entries in a different order")
    return None


def first_challenge_difference(a: Sequence[Challenge], b: Sequence[Challenge]) -> Difference | None:
    """The first pending challenge (in the version's order) that differs, or one run's extra ones."""
    for index in range(max(len(a), len(b))):
        ca = a[index] if index < len(a) else None
        cb = b[index] if index < len(b) else None
        if ca != cb:
            entry_id = (ca.entry_id if ca else None) or (cb.entry_id if cb else None)
            return Difference("challenge", f"#{index}: {_render_challenge(ca)} vs {_render_challenge(cb)}", entry_id)
    return None


def _render_challenge(challenge: Challenge | None) -> str:
    if challenge is None:
        return "(none)"
    return (f"{challenge.entry_id} by {_clip(challenge.content)!r} (support {challenge.support}, "
            f"v{challenge.first_version}-v{challenge.last_version})")


def _render_op(applied: AppliedOperation | None) -> str:
    if applied is None:
        return "(none)"
    op = applied.operation
    target = getattr(op, "entry_id", None) or getattr(op, "section", None) or ",".join(getattr(op, "entry_ids", []))
    content = getattr(op, "content", None)
    text = f"{op.op} {target}" + (f" {_clip(content)!r}" if content else "")
    return f"{text} -> {applied.outcome}" + (f" ({applied.reason})" if applied.reason else "")


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _some(items: list[str], limit: int = 3) -> str:
    if not items:
        return "none"
    return ", ".join(items[:limit]) + (f" (+{len(items) - limit})" if len(items) > limit else "")
