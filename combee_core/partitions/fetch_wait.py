"""How long a consumer lets the broker hold a fetch that has no data: the idle back-off of the fetch wait.

Tansu holds a fetch with no data for the whole wait even when records arrive meanwhile (docs/broker.md), so its
consumers fetch with a short wait (50 ms) to keep every hop quick; idle, that is ~20 fetches a second per consumer,
and the CPU of an idle worker and of its broker goes to them. :class:`IdleFetchWait` lengthens the wait of a
consumer whose fetches have come back empty for ``quiet_s``, doubling it at each further empty fetch up to
``ceiling_ms``, and returns to ``floor_ms`` at the first fetch that brings records. The cost: the first record after
a quiet spell waits up to the ceiling at each hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TANSU_IDLE_FETCH_WAIT_MS = 250
"""Default ceiling of the wait of an idle consumer on Tansu (``tansu_idle_fetch_wait_ms``), chosen by measurement
(``bench.idle_fetch``, docs/benchmarks.md "Idle back-off of the fetch wait"): an idle worker and its broker used 40 %
of what they used at 50 ms, and a version after a quiet spell came ~0.07 s later; 500 ms saved a little more (30 %)
for ~0.3 s per version."""

IDLE_AFTER_S = 1.0
"""How long a consumer's fetches must have come back empty before its wait lengthens."""


@dataclass
class IdleFetchWait:
    """The fetch wait of one consumer, from what its fetches brought: ``observe`` each fetch's outcome, use
    ``wait_ms`` for the next request. A ceiling at or below the floor turns the back-off off."""

    floor_ms: int
    ceiling_ms: int
    quiet_s: float = IDLE_AFTER_S
    factor: int = 2
    wait_ms: int = field(init=False)
    _records_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.floor_ms < 0 or self.factor < 2 or self.quiet_s < 0:
            raise ValueError(f"an idle fetch wait needs floor_ms >= 0, factor >= 2, quiet_s >= 0; got {self}")
        self.wait_ms = self.floor_ms

    def observe(self, got_records: bool, now: float) -> int:
        """The wait for the next fetch after one that brought records or not, at monotonic time ``now`` (s)."""
        if got_records or self._records_at is None:
            self._records_at = now
            self.wait_ms = self.floor_ms
        elif now - self._records_at >= self.quiet_s and self.ceiling_ms > self.floor_ms:
            self.wait_ms = min(self.ceiling_ms, max(1, self.wait_ms) * self.factor)
        return self.wait_ms
