"""The aggregator's windows: one per (playbook, batch, subgroup), complete at its expected count of copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from combee_core.models import ShuffledReflection

WindowKey = tuple[str, int, int]
"""(playbook_id, batch_id, subgroup)"""

CLOSED_BATCHES_REMEMBERED = 4096
"""Per playbook, how many most recent batches' closed windows are remembered to recognise late redeliveries."""


@dataclass(frozen=True)
class ReadyWindow:
    """A window ready for its aggregator call: copies in shuffle order, and whether any are missing."""

    key: WindowKey
    copies: tuple[ShuffledReflection, ...]
    expected_count: int
    closed_by: Literal["complete", "timeout"]

    @property
    def missing(self) -> int:
        return self.expected_count - len(self.copies)


@dataclass
class _OpenWindow:
    expected_count: int
    opened_at: float
    copies: dict[str, ShuffledReflection] = field(default_factory=dict)


AddOutcome = Literal["added", "duplicate", "late"]


class SubgroupWindows:
    """Collects shuffled copies into windows; redelivered or late copies never change a window's result."""

    def __init__(self) -> None:
        self._open: dict[WindowKey, _OpenWindow] = {}
        self._closed: dict[str, dict[int, set[int]]] = {}

    @staticmethod
    def key_of(copy: ShuffledReflection) -> WindowKey:
        return (copy.playbook_id, copy.batch_id, copy.subgroup)

    def is_closed(self, key: WindowKey) -> bool:
        playbook_id, batch_id, subgroup = key
        return subgroup in self._closed.get(playbook_id, {}).get(batch_id, set())

    def add(self, copy: ShuffledReflection, now: float) -> tuple[AddOutcome, ReadyWindow | None]:
        """Add a copy; returns the outcome and the window when this copy completed it."""
        key = self.key_of(copy)
        if self.is_closed(key):
            return "late", None
        window = self._open.get(key)
        if window is None:
            window = _OpenWindow(expected_count=copy.expected_count, opened_at=now)
            self._open[key] = window
        if copy.copy_id in window.copies:
            return "duplicate", None
        window.copies[copy.copy_id] = copy
        if len(window.copies) >= window.expected_count:
            return "added", self._close(key, "complete")
        return "added", None

    def expired(self, now: float, timeout_s: float) -> list[ReadyWindow]:
        """Close windows open longer than ``timeout_s``; their partial reports the missing copies."""
        due = [key for key, window in self._open.items() if now - window.opened_at >= timeout_s]
        return [self._close(key, "timeout") for key in sorted(due)]

    def drop(self, keys: list[WindowKey]) -> None:
        """Forget windows whose partials are not out (their partition was revoked): open ones, and closed ones whose
        call was cancelled, so that their copies, delivered again, form them again."""
        for key in keys:
            self._open.pop(key, None)
            playbook_id, batch_id, subgroup = key
            self._closed.get(playbook_id, {}).get(batch_id, set()).discard(subgroup)

    def _close(self, key: WindowKey, closed_by: Literal["complete", "timeout"]) -> ReadyWindow:
        window = self._open.pop(key)
        playbook_id, batch_id, subgroup = key
        batches = self._closed.setdefault(playbook_id, {})
        batches.setdefault(batch_id, set()).add(subgroup)
        if len(batches) > CLOSED_BATCHES_REMEMBERED:
            del batches[min(batches)]
        copies = tuple(sorted(window.copies.values(), key=lambda c: (c.position, c.copy_id)))
        return ReadyWindow(key=key, copies=copies, expected_count=window.expected_count, closed_by=closed_by)
