"""When a record the broker refused is sent again, and when sending it gives up.

A stage sends a refused record again (Tansu answers every produce with UnknownError while its storage restarts; a
broker away or a producer's cancel look alike to the sender), backing off 0.5 s doubling to 5 s. The broker's
watchdog ends a worker whose broker stops answering, but a broker that answers every produce with a refusal never
trips it: without a bound such a send went on for ever and its stage with it. The bound is the time a worker keeps
going without its broker (``broker_loss_grace_s``, 60 s by default: a storage restart takes 1-2 s): from the first
refusal of a record, sending it again stops once that much time has passed, and the stage fails with one line
naming the topic (:class:`RecordRefused`). Pure: the clock is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from combee_core.errors import CombeeError

FIRST_DELAY_S = 0.5
MOST_DELAY_S = 5.0


class RecordRefused(CombeeError, ConnectionError):
    """The broker kept refusing a record past the budget; the message names the topic and how long it was tried."""

    exit_code = 3
    """As for a lost broker: the broker, not the command, needs looking at."""


@dataclass
class ResendBudget:
    """One record's sends again: :meth:`refused` after each refusal says how long to wait, or that the budget is
    spent (the first refusal starts it)."""

    budget_s: float
    first_delay_s: float = FIRST_DELAY_S
    most_delay_s: float = MOST_DELAY_S
    refusals: int = 0
    refused_since: float | None = None
    _delay: float | None = field(default=None, repr=False)

    def refused(self, now: float) -> float | None:
        """A send was refused at ``now``: seconds to wait before sending again (the last wait ends at the budget's
        end, so one more attempt is made then), or None when the budget is spent."""
        self.refusals += 1
        if self.refused_since is None:
            self.refused_since = now
        left = self.refused_since + self.budget_s - now
        if left <= 0:
            return None
        delay = self.first_delay_s if self._delay is None else self._delay
        self._delay = min(self.most_delay_s, delay * 2)
        return min(delay, left)

    def gave_up(self, topic: str, now: float, last: str) -> RecordRefused:
        """The error to raise once :meth:`refused` said None; ``last``: the last refusal, as one line."""
        tried_s = 0.0 if self.refused_since is None else now - self.refused_since
        return RecordRefused(f"the broker refused a record to {topic} for {tried_s:.1f} s ({self.refusals} "
                             f"attempt(s), the last: {last}); gave up after broker_loss_grace_s={self.budget_s:g}")
