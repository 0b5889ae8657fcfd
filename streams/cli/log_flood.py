"""A guard against log floods: the same message template from the same logger is shown a few times per window,
then counted, and the count is reported with the next one shown.

A lost broker makes aiokafka (and the stages' retries) log the same few errors many times a second; this keeps a
worker's log readable while it decides whether the broker is gone for good (``broker_loss_grace_s``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

BURST = 3
"""Records of one template shown per window before the rest are counted instead."""
WINDOW_S = 30.0
MAX_TEMPLATES = 4096
CLIENT_LOGGERS = ("aiokafka",)
"""Kafka client loggers: a lost broker makes each of them log many different messages (one per node, group and
request) about one cause, which the worker's watchdog reports itself; their records are limited per logger, not per
template: one per logger and level per window, the rest counted."""


class RepeatedLogLimit(logging.Filter):
    """Lets ``burst`` records per (logger, level, template) through every ``window_s`` seconds (one per logger and
    level for ``client_loggers`` and their children); drops the rest and appends their count to the next record
    shown."""

    def __init__(self, burst: int = BURST, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, client_loggers: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.client_loggers = client_loggers
        self._clock = clock
        self._windows: dict[tuple[str, int, str], tuple[float, int, int]] = {}
        """key -> (window start, shown in window, dropped since the last one shown)"""

    @staticmethod
    def _template(record: logging.LogRecord) -> str:
        """What counts as one kind of record: the template of a warning or error (a retry loop's flood); the whole
        message of an info line (a stage's ownership changes differ only in their arguments, and each one matters)."""
        return record.getMessage() if record.levelno <= logging.INFO else str(record.msg)

    def _is_client(self, name: str) -> bool:
        return any(name == prefix or name.startswith(prefix + ".") for prefix in self.client_loggers)

    def filter(self, record: logging.LogRecord) -> bool:
        client = self._is_client(record.name)
        key = (record.name, record.levelno, "*" if client else self._template(record))
        burst = 1 if client else self.burst
        now = self._clock()
        if len(self._windows) > MAX_TEMPLATES:  # messages formatted before logging: forget the expired ones
            self._windows = {k: v for k, v in self._windows.items() if now - v[0] < self.window_s}
        start, shown, dropped = self._windows.get(key, (now, 0, 0))
        if now - start >= self.window_s:
            start, shown = now, 0
        if shown >= burst:
            self._windows[key] = (start, shown, dropped + 1)
            return False
        self._windows[key] = (start, shown + 1, 0)
        if dropped:
            record.msg = f"{record.getMessage()} [{dropped} more like this not shown]"
            record.args = None
        return True


def limit_repeated_logs(handlers: Iterable[logging.Handler] | None = None, burst: int = BURST,
                        window_s: float = WINDOW_S) -> RepeatedLogLimit:
    """Install the limit on ``handlers`` (default: every handler of the root logger, where every logger's records
    end up)."""
    limit = RepeatedLogLimit(burst, window_s, client_loggers=CLIENT_LOGGERS)
    for handler in logging.getLogger().handlers if handlers is None else handlers:
        handler.addFilter(limit)
    return limit
