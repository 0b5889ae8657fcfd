"""Is a playbook falling behind its stream? Lag in traces and seconds, rate in vs out, an estimate to catch up; and
the overload policy's choice of which traces to shed (docs/operations.md, "Capacity and overload").

Pure: the reflector's binding feeds a :class:`BacklogMonitor` what it sees (each trace it consumes, with the time
it was sent; the traces still unread on the playbook's partition; each version, from its live view of
``playbook``) and the time; the monitor answers a :class:`Backlog` per playbook.

- **rate in**: traces sent per second, from the growth of what was consumed plus what is still unread;
- **rate out**: traces per second that reached a version (its lineage);
- **lag**: traces sent but not yet in a version (consumed and not learned, plus unread), and the age of the oldest;
- **falling behind**: over the last ``window_s`` (counted from the playbook's first version: a pipeline filling up
  before it is not behind), the lag grew, more came in than went out (by over ``margin``, 10%: a stream at capacity
  measures 20.4 in vs 20.0 out one window and the reverse the next) and the oldest trace waits longer than half
  the window and than 2.5 gaps between versions (:data:`STEADY_AGE_GAPS`); or the oldest trace waits longer
  than ``warn_after_s`` (a pipeline that never makes a version too);
- **catch up**: lag / (rate out - rate in) when out outruns in, else never at these rates.

Beyond capacity, the policy (:func:`keep_fraction`): ``keep`` learns every trace and falls behind; ``sample`` sheds
successes first (failures carry the lessons) so that what is kept fits the rate out.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Backlog", "BacklogMonitor", "OverloadPolicy", "keep_fraction", "kept", "rate_between_versions"]

OverloadPolicy = Literal["keep", "sample"]

STEADY_AGE_GAPS = 2.5
"""A chain that keeps up holds its oldest trace up to about two gaps between versions and a reflection (a batch
filling, the one before it being made): at batch 100 and 20 traces/s, ~10 s, which half of the default window
(10 s) does not clear; the sustained bench flagged such a stream when three versions took 5.8 s instead of 3.9
(tests/unit/test_backlog.py: a spell of up to 5 such versions is not flagged, 8 are; 30 traces/s against 22 is
flagged 28 s in, when the window allows)."""


@dataclass(frozen=True)
class Backlog:
    """One playbook's backlog at one time."""

    playbook_id: str
    lag_traces: int
    lag_s: float
    rate_in: float
    rate_out: float
    falling_behind: bool
    catch_up_s: float | None
    """Seconds to clear the lag at the current rates (None: the lag does not shrink at these rates)."""

    def describe(self) -> str:
        catch_up = f"catches up in ~{self.catch_up_s:.0f} s" if self.catch_up_s is not None else "never catches up " \
            "at these rates"
        verdict = "FALLING BEHIND" if self.falling_behind else "keeping up"
        return (f"{self.playbook_id}: {verdict}: {self.lag_traces} trace(s) not yet in a version, oldest sent "
                f"{self.lag_s:.0f} s ago; in {self.rate_in:.3g} traces/s, out {self.rate_out:.3g} traces/s; "
                f"{catch_up}")


@dataclass
class _Playbook:
    pending: dict[str, float] = field(default_factory=dict)
    """trace id -> when it was sent, for traces consumed and not yet in a version."""
    unread: int = 0
    consumed: int = 0
    learned: int = 0
    history: deque[tuple[float, int, int, int]] = field(default_factory=deque)
    """(time, consumed + unread so far, learned so far, lag) samples within the window."""
    outs: deque[tuple[float, int]] = field(default_factory=deque)
    """(time, traces settled) of each settling (a version) within the window, and the one before it."""
    oldest_unread_s: float | None = None
    settled: dict[str, None] = field(default_factory=dict)
    """Recently settled trace ids (a redelivered or resent trace is not pending again), the newest kept."""


class BacklogMonitor:
    """Per playbook, the traces consumed and learned, and what is still unread; :meth:`assess` answers."""

    def __init__(self, window_s: float = 20.0, warn_after_s: float = 120.0, max_pending: int = 200_000,
                 margin: float = 0.1) -> None:
        if not (window_s > 0 and warn_after_s > 0 and max_pending >= 1 and margin >= 0):
            raise ValueError(f"need window_s, warn_after_s > 0, max_pending >= 1 and margin >= 0, got {window_s}, "
                             f"{warn_after_s}, {max_pending}, {margin}")
        self.window_s, self.warn_after_s, self.max_pending = window_s, warn_after_s, max_pending
        self.margin = margin
        """How much faster the rate in must be than the rate out (a share of it): a stream at capacity measures
        20.4 in vs 20.0 out one window and the reverse the next."""
        self._playbooks: dict[str, _Playbook] = {}

    def _of(self, playbook_id: str) -> _Playbook:
        return self._playbooks.setdefault(playbook_id, _Playbook())

    def playbook_ids(self) -> list[str]:
        return sorted(self._playbooks)

    def consumed(self, playbook_id: str, trace_id: str, sent_at_s: float) -> None:
        """A trace of the playbook was read (it was sent at ``sent_at_s``)."""
        state = self._of(playbook_id)
        if trace_id in state.pending or trace_id in state.settled:
            return
        if len(state.pending) >= self.max_pending:  # the oldest is forgotten, not the count
            state.pending.pop(next(iter(state.pending)))
        state.pending[trace_id] = sent_at_s
        state.consumed += 1

    def shed(self, playbook_id: str, trace_id: str) -> None:
        """A trace read and shed by the overload policy: it came in (the rate in counts it), it is not waited for,
        and it did not go out (the rate out is what the pipeline learns)."""
        state = self._of(playbook_id)
        state.consumed += 1
        state.settled[trace_id] = None

    def settled(self, playbook_id: str, trace_ids: list[str], at_s: float | None = None) -> int:
        """Traces that reached a version (or a dead letter) at ``at_s``: no longer pending. Returns how many were.

        With ``at_s``, the rate out is measured between versions (traces learned after the first version of the
        window over the time to the last): a window holding 3 or 4 versions of 100 would otherwise read 15 or
        20 traces/s of a steady 20."""
        state = self._of(playbook_id)
        done = 0
        for trace_id in trace_ids:
            done += state.pending.pop(trace_id, None) is not None
            state.settled[trace_id] = None
        while len(state.settled) > self.max_pending:
            state.settled.pop(next(iter(state.settled)))
        state.learned += done
        if at_s is not None and done:
            state.outs.append((at_s, done))
        return done

    def unread(self, playbook_id: str, records: int, oldest_sent_at_s: float | None = None) -> None:
        """Records of the playbook's partition(s) not read yet (and when the next of them was sent, if known)."""
        state = self._of(playbook_id)
        state.unread = max(0, records)
        state.oldest_unread_s = oldest_sent_at_s if records > 0 else None

    def _rate_out(self, state: _Playbook, now: float) -> float | None:
        return _between_versions(state.outs, now, self.window_s)

    def assess(self, playbook_id: str, now: float) -> Backlog:
        """The playbook's backlog now; also records a sample for the rates (call it every few seconds)."""
        state = self._of(playbook_id)
        lag = len(state.pending) + state.unread
        if state.learned:  # rates from the first version on: a pipeline filling up before it is not behind
            state.history.append((now, state.consumed + state.unread, state.learned, lag))
        while len(state.history) > 2 and now - state.history[1][0] >= self.window_s:
            state.history.popleft()
        first = state.history[0] if state.history else (now, state.consumed + state.unread, state.learned, lag)
        span = now - first[0]
        rate_in = (state.consumed + state.unread - first[1]) / span if span > 0 else 0.0
        rate_out = self._rate_out(state, now)
        if rate_out is None:
            rate_out = (state.learned - first[2]) / span if span > 0 else 0.0
        sent = [*state.pending.values(), *([state.oldest_unread_s] if state.oldest_unread_s is not None else [])]
        lag_s = max(0.0, now - min(sent)) if sent else 0.0
        # over a whole window the lag grew, more came in than went out, and the oldest waits longer than half a window
        # and than STEADY_AGE_GAPS gaps between versions (below that it is a batch filling up and the one before it
        # being made; the window keeps one version's lumpiness from deciding)
        grew = (span >= self.window_s and lag > first[3] and rate_in > (1 + self.margin) * rate_out
                and lag_s > max(self.window_s / 2, STEADY_AGE_GAPS * _gap(state.outs)))
        falling = lag > 0 and (grew or lag_s > self.warn_after_s)
        catch_up = lag / (rate_out - rate_in) if rate_out > rate_in else (0.0 if lag == 0 else None)
        return Backlog(playbook_id, lag, lag_s, max(0.0, rate_in), max(0.0, rate_out), falling, catch_up)


def _gap(outs: deque[tuple[float, int]]) -> float:
    """Mean seconds between the window's versions (0 with fewer than two)."""
    return (outs[-1][0] - outs[0][0]) / (len(outs) - 1) if len(outs) >= 2 else 0.0


def _between_versions(outs: deque[tuple[float, int]], now: float, window_s: float) -> float | None:
    while len(outs) > 2 and now - outs[1][0] >= window_s:
        outs.popleft()
    return rate_between_versions(list(outs), now, window_s)


def rate_between_versions(outs: Sequence[tuple[float, int]], now: float, window_s: float) -> float | None:
    """Traces per second out of ``outs`` ((time, traces) per version, ascending): those of the versions within
    ``window_s`` of ``now`` (and the one before them) after the first, over the time from the first to the last; to
    ``now`` when no version came for two of their gaps (the rate out is falling: say so). None with fewer than two."""
    start = 0
    while len(outs) - start > 2 and now - outs[start + 1][0] >= window_s:
        start += 1
    outs = outs[start:]
    if len(outs) < 2 or outs[-1][0] <= outs[0][0]:
        return None
    first, last = outs[0][0], outs[-1][0]
    gap = (last - first) / (len(outs) - 1)
    end = last if now - last <= 2 * gap else now
    return sum(count for _, count in outs[1:]) / (end - first)


def keep_fraction(backlog: Backlog, failure_share: float, headroom: float = 0.9) -> tuple[float, float]:
    """(share of failures kept, share of successes kept) so what is kept fits ``headroom`` x the rate out.

    Successes are shed first: failures are all kept unless they alone exceed the rate out."""
    if not 0 <= failure_share <= 1:
        raise ValueError(f"failure_share must be in [0, 1], got {failure_share}")
    if not backlog.falling_behind or backlog.rate_in <= 0:
        return 1.0, 1.0
    budget = headroom * backlog.rate_out
    failures, successes = backlog.rate_in * failure_share, backlog.rate_in * (1 - failure_share)
    if failures >= budget:
        return (budget / failures if failures > 0 else 1.0), 0.0
    return 1.0, (min(1.0, (budget - failures) / successes) if successes > 0 else 1.0)


def kept(trace_id: str, share: float, seed: int) -> bool:
    """Whether a trace is kept at ``share``: a stable draw from (seed, trace id), so a redelivered trace gets the
    same answer."""
    if share >= 1:
        return True
    if share <= 0:
        return False
    digest = hashlib.sha256(f"{seed}:{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share if math.isfinite(share) else True
