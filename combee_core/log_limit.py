"""One log line per condition, not one per record: a condition that many records meet at once (a thousand traces
waiting for the same playbook version, a burst of dead letters from one stage) is said the first time, then at most
once per interval, with how many times it occurred since the last line.

Pure: the caller passes the time (``now``, monotonic seconds), so a test drives it with its own clock. Log floods
from libraries (aiokafka's retries) are limited by a logging filter instead (``streams/cli/log_flood.py``); this is
for our own warnings, at their source, where the condition and its count are known.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

MAX_CONDITIONS = 1024
"""Conditions remembered before those not seen for an interval are forgotten (a forgotten one is said again at
once, which is what its next occurrence after a quiet interval gets anyway)."""


@dataclass
class RepeatLimit(Generic[K]):
    """Per condition (any hashable key): say its first occurrence, then at most one every ``interval_s`` seconds."""

    interval_s: float
    _said_at: dict[K, float] = field(default_factory=dict)
    _since: dict[K, int] = field(default_factory=dict)
    """Occurrences not said since the last line, per condition."""

    def observe(self, key: K, now: float) -> int | None:
        """An occurrence of ``key`` at ``now``: None when it is not to be said, else how many occurrences the line
        stands for (this one and those not said since the last line; 1 the first time)."""
        self._since[key] = self._since.get(key, 0) + 1
        said_at = self._said_at.get(key)
        if said_at is not None and now - said_at < self.interval_s:
            return None
        if said_at is None and len(self._said_at) >= MAX_CONDITIONS:
            self._forget_quiet(now)
        self._said_at[key] = now
        return self._since.pop(key)

    def end(self, key: K) -> int:
        """The condition is over (the version arrived): forget it, so that it is said at once if it comes back;
        returns the occurrences not said since its last line."""
        self._said_at.pop(key, None)
        return self._since.pop(key, 0)

    def _forget_quiet(self, now: float) -> None:
        for key in [k for k, said_at in self._said_at.items() if now - said_at >= self.interval_s]:
            self.end(key)
