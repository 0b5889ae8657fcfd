"""A two-deep version chain in closed form, for the controller's tests: batches of given sizes, each aggregated for
``aggregate_s(bs)`` from when it may start and reduced for ``reduce_s(bs)`` once the version before it is out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from combee_core.models import BatchMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ChainRun:
    closed_s: list[float]
    published_s: list[float]
    aggregated_s: list[float]

    def metrics(self, sizes: Sequence[int], playbook_id: str = "pb") -> list[BatchMetrics]:
        """The reducer's metrics of each version (round_s from the previous version, none for the first)."""
        return [BatchMetrics(playbook_id=playbook_id, batch_id=b, version=b + 1, batch_size=size, k=6,
                             delay_s=self.published_s[b] - self.closed_s[b], llm_critical_path_s=0.0, llm_calls=7,
                             round_s=self.published_s[b] - self.published_s[b - 1] if b else None,
                             batch_closed_at=T0 + timedelta(seconds=self.closed_s[b]))
                for b, size in enumerate(sizes)]


def run_chain(sizes: Sequence[int], aggregate_s: Callable[[int], float], reduce_s: Callable[[int], float],
              lag: int, rate: float | None = None) -> ChainRun:
    """Batch b closes when its traces have arrived (at ``rate``; None: all at 0) and its context version (made by
    batch b - 1 - lag) is out, as chain pacing closes it; it starts at once."""
    closed: list[float] = []
    published: list[float] = []
    aggregated: list[float] = []
    arrived = 0
    for b, size in enumerate(sizes):
        arrived += size
        filled = arrived / rate if rate else 0.0
        context = published[b - 1 - lag] if b - 1 - lag >= 0 else 0.0
        closed.append(max(filled, context))
        aggregated.append(closed[b] + aggregate_s(size))
        previous = published[b - 1] if b else 0.0
        published.append(max(aggregated[b], previous) + reduce_s(size))
    return ChainRun(closed, published, aggregated)
