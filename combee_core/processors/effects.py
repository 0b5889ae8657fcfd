"""What a processor asks its stage to do, in order.

Inputs are named by *tokens*: opaque values the stage hands over with each input (its consumed record; anything
hashable in a test). The stage performs a list of effects in order, with two rules every binding keeps:

- a :class:`Publish` with a ``number`` is a numbered record under the reading rule (``combee_core.log_order``: the
  first record of each (playbook, number) counts): the effects after it in the same list are performed only if
  that record counts and the stage still owns the playbook;
- an :class:`Acknowledge` is performed only once every record published before it has been acknowledged by the
  broker, so an input is never committed before its effects are durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.models import CombeeModel


@dataclass(frozen=True)
class Publish:
    """Send ``value`` to the logical topic ``topic`` (name without the run's prefix), keyed ``key``."""

    topic: str
    key: str
    value: CombeeModel
    number: tuple[str, int] | None = None
    """(playbook, number) of a record that counts only if it is the first of its number in its log."""
    headers: tuple[tuple[str, bytes], ...] = ()
    """Kafka headers: hints about the stream (``UPSTREAM_DRAINED``), never part of the record's content."""


@dataclass(frozen=True)
class Reject:
    """Dead-letter an input (``token``; None for a dead letter that has no input record of its own) with the reason a
    person can act on. A rejected input counts as done."""

    token: object | None
    reason: str
    error_type: str
    trace_id: str | None = None
    playbook_id: str | None = None


@dataclass(frozen=True)
class Acknowledge:
    """These inputs are done: every effect they cause has been asked for before this one."""

    tokens: tuple[object, ...]


@dataclass(frozen=True)
class Count:
    """Add ``amount`` to the stage's counter ``name`` (exported as a metric)."""

    name: str
    amount: int = 1


Effect = Publish | Reject | Acknowledge | Count


def acknowledge(tokens: Sequence[object]) -> list[Effect]:
    """An :class:`Acknowledge` of ``tokens``, or nothing when there are none."""
    return [Acknowledge(tuple(tokens))] if tokens else []
